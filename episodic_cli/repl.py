"""`epi chat`: a read-eval-print loop over one store, with conversation history for follow-up questions.

At a terminal the line is read by prompt_toolkit: its own line editing (rich's prompt before readline's input() was
erased by Backspace and Ctrl-U, rich#2293), the questions kept across sessions in epi's data directory
(`chat-history`) and the /commands completed by Tab. Piped or scripted input is read by input(), line by line."""
from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from rich.markup import escape

from . import render
from .api import answer_of, whole_number
from .engine.ask_options import AskOptions, AskRequest
from .engine.paths import data_dir
from .engine.errors import EpiError
from .engine.retrieval.question_kind import QuestionKind
from .engine.retrieval.scope import documents_matching
from .chat_prefetch import ChatPrefetch
from .continued import TURNS_KEPT
from .engine.workspace import Workspace
from .store import Store, StoreError

HELP = """commands:
  /sources   show the sources of the last answer
  /reset     forget the conversation (start a new topic)
  /k N       retrieve N events per question (now {k})
  /doc GLOB  answer only from documents matching GLOB (several: /doc a.pdf 'src/*.py'); /doc alone: all (now {docs})
  /help      this help (at a terminal: Tab completes a command, Up and Ctrl-R recall earlier lines)
  /exit      leave (or Ctrl-D); Ctrl-C stops an answer without leaving"""
HISTORY_TURNS = TURNS_KEPT  # earlier question/answer pairs kept in the prompt, as `epi ask --continue` keeps
COMMANDS = ("/sources", "/reset", "/k", "/doc", "/help", "/exit")  # what Tab completes (HELP's order)
HISTORY_FILE = "chat-history"  # in data_dir(): the lines typed at `epi chat`, prompt_toolkit's FileHistory format


class CommandCompleter(Completer):
    """The /commands, completed only as the line's first word: a question that mentions "/so" is left alone."""

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterator[Completion]:
        word = document.text_before_cursor.lstrip()
        if not word.startswith("/") or any(c.isspace() for c in word):
            return
        for command in COMMANDS:
            if command.startswith(word):
                yield Completion(command, start_position=-len(word))


def _terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _history() -> History:
    """The lines typed before, in the data directory (readable by its owner only: questions can be private); kept in
    memory for this session alone when that directory cannot be written."""
    path = data_dir() / HISTORY_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    except OSError as exc:
        render.warning(f"chat history is not kept: {exc}")
        return InMemoryHistory()
    return FileHistory(path)


def line_reader() -> Callable[[], str]:
    """A function that reads the next line typed, raising EOFError at the end (Ctrl-D) and KeyboardInterrupt on
    Ctrl-C: prompt_toolkit at a terminal, input() otherwise (piped or scripted input, tests)."""
    if not _terminal():
        try:
            import readline  # noqa: F401 - line editing for input() where stdin is a terminal but stdout is not
        except ImportError:  # pragma: no cover - Windows
            pass
        return lambda: render.out.input("[bold cyan]epi>[/] ")
    session: PromptSession[str] = PromptSession(history=_history(), completer=CommandCompleter())
    prompt = FormattedText([("bold ansicyan", "epi>"), ("", " ")])
    return lambda: session.prompt(prompt)


def run_repl(ws: Workspace, store: Store, options: AskOptions, pool: int | None = None, prefetch: bool = False
             ) -> None:
    """The chat: each question an AskRequest with `options` (`/k` and `/doc` change them for the questions after)
    and `pool`. `prefetch`: while the user reads and types, a helper prepares the blocks a follow-up would likely
    read (chat_prefetch.py; kv mode only)."""
    ahead = ChatPrefetch(ws, store) if prefetch and ws.resolve(store, options).mode == "kv" else None
    try:
        _loop(ws, store, options, pool, ahead)
    finally:
        if ahead is not None:
            ahead.close()


def _loop(ws: Workspace, store: Store, options: AskOptions, pool: int | None, ahead: ChatPrefetch | None) -> None:
    read_line = line_reader()
    history: list[dict[str, str]] = []
    last_sources, last_grouped = [], False
    render.err.print(f"chatting with store {escape(str(store.path))} · /help for commands · Ctrl-D to leave")
    while True:
        try:
            line = read_line().strip()
        except EOFError:
            render.out.print()
            return
        except KeyboardInterrupt:
            render.out.print("\n[dim](Ctrl-D or /exit leaves)[/]")
            continue
        if not line:
            continue
        if line.startswith("/"):
            cmd, _, arg = line.partition(" ")
            if cmd in ("/exit", "/quit"):
                return
            if cmd == "/help":
                docs = escape(" ".join(options.docs)) if options.docs else "all"
                render.out.print(HELP.format(k=options.k, docs=docs))
            elif cmd == "/reset":
                history, last_sources = [], []
                render.out.print("[dim]conversation cleared[/]")
            elif cmd == "/sources":
                render.sources(last_sources, grouped=last_grouped)
            elif cmd == "/k":
                try:
                    options = replace(options, k=whole_number(arg, "k", 1, 50))  # "²" too is refused ("²".isdigit())
                    render.out.print(f"[dim]k = {options.k}[/]")
                except EpiError:
                    render.error("usage: /k N, with N from 1 to 50")
            elif cmd == "/doc":
                try:
                    globs = shlex.split(arg)  # quoted as at a shell: /doc 'src/*.py' "My Notes.pdf"
                except ValueError as exc:
                    render.error(f"/doc {arg}: {exc}; quote each pattern as at a shell")
                    continue
                if globs and not documents_matching(store, globs):
                    render.error(f"/doc {' '.join(globs)} matches no document; `epi ls` lists them")
                else:
                    options = replace(options, docs=globs or None)
                    shown = ", ".join(sorted(documents_matching(store, globs).values())) if globs else "all documents"
                    render.out.print(f"[dim]answering from {escape(shown)}[/]")
            else:
                render.error(f"unknown command {cmd}; /help lists them")
            continue
        # A follow-up ("and how big is it on disk?") is searched for as the standalone question it means, written by
        # the answer model from the conversation (shown dimmed; Workspace.answer); a question naming its own
        # chapter, section, page, file or symbol stands alone.
        try:  # Ctrl-C anywhere in the turn (the rewrite, retrieval, the answer) stops the turn, not the chat
            request = AskRequest(line, history[-2 * HISTORY_TURNS:], options, pool)
            if ahead is not None:
                ahead.pause()  # the question gets the cores; the helper finishes the event it is preparing
            store.refresh()  # an ingest running beside the chat commits document after document
            result, stream = ws.answer(store, request)
            render.scope(result.scope)
            render.reading(result)
            render.left_cold(result, keeps_blocks=store.kv_budget > 0)
            # The model sees the user's own words as the question; retrieval used the rewrite (if any).
            shown: list[str] = []  # what the user saw of the answer, kept in the conversation if it is stopped
            try:
                render.stream_answer(stream, shown)
                with render.checking_evidence():
                    result.verify()  # the answer model checks the quotes before they are shown
                render.evidence(answer_of(result))
            except KeyboardInterrupt:
                render.out.print("\n[dim](stopped)[/]")
            last_sources = result.retrieved
            last_grouped = result.kind is not QuestionKind.LOOKUP  # a part read whole: its runs, as `epi ask` shows
            n = len(result.retrieved)
            render.out.print(f"[dim]{n} source{'' if n == 1 else 's'} · /sources to list them[/]")
            if ahead is not None:
                ahead.ahead(result.retrieved + result.left_cold)  # what it left out first
        except (EpiError, StoreError) as exc:
            render.error(str(exc))
            continue
        except KeyboardInterrupt:  # before the answer began: nothing was answered, the conversation is as it was
            render.out.print("\n[dim](stopped)[/]")
            continue
        history += [{"role": "user", "content": line}, {"role": "assistant", "content": "".join(shown).strip()}]
