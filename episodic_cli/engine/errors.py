"""The exception types the CLI turns into a one-line message and a non-zero exit."""


class EpiError(Exception):
    """A user-facing failure: the message says what went wrong and what to do about it."""


class NotFound(EpiError):
    """What a name or id asks for is not in the store (a document, an event): the user's error, said in one line."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is (app.main installs the handler): a KeyboardInterrupt, so that every
    clean-up an interruption gets runs for it too, then told apart in the message and the exit code (143)."""
