"""The one exception type the CLI turns into a one-line message and a non-zero exit."""


class EpiError(Exception):
    """A user-facing failure: the message says what went wrong and what to do about it."""
