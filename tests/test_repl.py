"""`epi chat` at a terminal (episodic_cli/repl.py): prompt_toolkit's line editor with the questions kept in epi's data
directory and the /commands completed; driven here by prompt_toolkit's own pipe input, as a terminal would type."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from prompt_toolkit.application import create_app_session
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from episodic_cli import repl
from episodic_cli.engine.ask_options import AskOptions


def test_chat_at_a_terminal_keeps_history_in_the_data_dir_and_completes_commands(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EPI_HOME", str(tmp_path))
    monkeypatch.setattr(repl, "_terminal", lambda: True, raising=False)  # the pipe below stands for the terminal
    store = SimpleNamespace(path=tmp_path / "store")  # only commands are typed: no question reaches the store
    with create_pipe_input() as keys, create_app_session(input=keys, output=DummyOutput()) as terminal:

        def wait_for(condition) -> None:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not (terminal.app is not None and condition(terminal.app)):
                time.sleep(0.01)

        def type_keys():
            # Completion runs in the background, as at a terminal: each key waits for what the last one started.
            keys.send_text("/so")
            wait_for(lambda app: app.current_buffer.complete_state and app.current_buffer.complete_state.completions)
            keys.send_text("\t")  # Tab completes /so to /sources
            wait_for(lambda app: app.current_buffer.text == "/sources")
            keys.send_text("\r/k 7\r")
            keys.send_text("\x03")  # Ctrl-C at the prompt: the hint, and the chat goes on
            keys.send_text("/help\r")
            keys.send_text("\x04")  # Ctrl-D leaves

        typist = threading.Thread(target=type_keys, daemon=True)
        typist.start()
        repl.run_repl(None, store, AskOptions(k=5))
        typist.join(30)
    out = capsys.readouterr().out
    assert "no sources" in out  # /sources ran
    assert "(Ctrl-D or /exit leaves)" in out
    assert "(now 7)" in out  # /help after /k 7: the chat went on after Ctrl-C
    history = (tmp_path / "data" / "chat-history").read_text()
    assert [ln[1:] for ln in history.splitlines() if ln.startswith("+")] == ["/sources", "/k 7", "/help"]


def test_commands_complete_only_as_the_first_word():
    completer = repl.CommandCompleter()

    def complete(text: str) -> list[str]:
        return [c.text for c in completer.get_completions(Document(text), CompleteEvent(completion_requested=True))]

    assert complete("/so") == ["/sources"]
    assert complete("/") == [c for c in repl.COMMANDS]
    assert complete("/d") == ["/doc"]
    assert complete("what does /so") == []
    assert complete("/doc a") == []
    assert complete("plain question") == []


class _Chat:
    """A workspace and store that answer from a script (failure injection: Ctrl-C at set places of a turn)."""

    kv_budget = 10**9

    def __init__(self, tmp_path):
        self.path = tmp_path / "store"
        self.asked: list[tuple[str, list[dict[str, str]]]] = []

    # the store
    def refresh(self) -> None:
        pass

    def documents(self):
        return [SimpleNamespace(id=1, path="notes/My Notes.md", display_path="notes/My Notes.md")]

    # the workspace
    def condense(self, history, line):
        if "rewrite" in line:
            raise KeyboardInterrupt  # Ctrl-C while the follow-up is rewritten
        return line

    def answer(self, store, request):  # Workspace.answer: a follow-up is rewritten, then asked
        line = request.question
        if request.turns:
            self.condense(request.turns, line)
        self.asked.append((line, list(request.history)))

        def stream():
            yield "The keys are "
            yield "in the tin."
            if "stop" in line:
                raise KeyboardInterrupt  # Ctrl-C part-way through the answer

        result = SimpleNamespace(scope=None, search=None, reading=None, left_cold=[], cold_passages=[], retrieved=[],
                                 kind=None, verify=lambda: [])
        return result, stream()


def test_chat_survives_ctrl_c_anywhere_in_a_turn_and_bad_commands(tmp_path, monkeypatch, capsys):
    lines = iter(["/k ²", "/k 3", "/doc 'My Notes.md'", "/doc 'unclosed", "???", "where are the keys? stop",
                  "and the rewrite?", "and the lid?"])

    def read_line() -> str:
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr(repl, "line_reader", lambda: read_line)
    # the chat renders the public record of each answer; this fake one has no quotes
    monkeypatch.setattr(repl, "answer_of", lambda result: SimpleNamespace(sentences=[], supported=False, evidence=[]))
    chat = _Chat(tmp_path)
    repl.run_repl(chat, chat, AskOptions(k=5))  # returns at the end of input: no traceback, no exit
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "usage: /k N" in out and "k = 3" in out
    assert "answering from notes/My Notes.md" in out  # a quoted name with a space
    assert "quote each pattern" in out
    assert "has no words" in out
    assert out.count("(stopped)") == 2  # in the answer, and in the rewrite
    # the stopped answer is kept as far as it was shown; the interrupted turn left no trace
    assert [q for q, _ in chat.asked] == ["where are the keys? stop", "and the lid?"]
    assert chat.asked[1][1] == [{"role": "user", "content": "where are the keys? stop"},
                                {"role": "assistant", "content": "The keys are in the tin."}]
