"""`epi mcp`: the archive as a Model Context Protocol server (stdio, or streamable HTTP on 127.0.0.1), a thin layer
over api.Archive with the model, embedder and index loaded once and held between calls.

- Tools: search, ask, read_event, list_documents, summary. Resources: each document's outline
  (`epi://outline/{document_id}`).
- `ask` streams as progress notifications, where the client asks for progress: first a status line saying what the
  answer reads ("epi: reading 5 passages (812 tokens)"), then the answer's text so far, growing, the first token at
  once and then at most every PROGRESS_EVERY_S. Status lines begin with "epi: "; every other message is answer text.
- Every call runs on one engine thread (the store's SQLite connection and llama.cpp's contexts belong to it), one
  at a time in order of arrival; a caller that has to wait is told so at once (a progress notification and a log
  message) and how long it waited.
- A failure a user can cause (EpiError, StoreError: an unknown event, an empty question, a --doc that matches
  nothing) comes back as a tool error (isError) holding the one line `epi` prints; the server stays up.
- It writes nothing to the store but KV blocks, which answers may keep under the store's budget: not the database,
  the index, nor the retrievals.log `epi ask` counts its answers' events in (Archive(record_retrievals=False)).

Imported only by `epi mcp`: the `mcp` package is an optional extra (`pip install 'epi[mcp]'`).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.types import CallToolResult, Resource, TextContent, ToolAnnotations

from . import __version__
from .api import Answer, Archive, Document, Event, Hit, Quote, SecondLook, Summary, whole_number
from .engine.ask_options import DEFAULT_K, DEFAULT_READ, READ_CHOICES, AskRequest
from .engine.errors import EpiError, NotFound
from .store import StoreError

log = logging.getLogger("episodic_cli.mcp")
MAX_K = 50
MAX_NEIGHBOURS = 5
PROGRESS_EVERY_S = 0.1  # streamed answer text: the first token at once, then at most this often
STATUS = "epi: "  # status lines (a wait, what an answer reads) begin so; the other progress messages are answer text
OUTLINE_URI = "epi://outline/{document_id}"
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)

INSTRUCTIONS = (
    "epi answers questions about the documents of one local archive (books, PDFs, manuals, codebases) and cites the "
    "pages or lines it used. `ask` answers a question with its evidence quotes and sources; `search` finds passages "
    "and their event ids; `read_event` reads one passage whole with its neighbours; `list_documents` names what is in "
    "the archive; `summary` returns the map's summaries of a document or a part of it. Each document's outline "
    "(chapters, sections, code symbols) is a resource.")


def error_line(exc: BaseException) -> str:
    """What the CLI prints for the same failure (app.handle_errors, render.error)."""
    return f"error: {exc}"


class _Status:
    def __init__(self, message: str):
        self.message = message


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


_DONE = object()


class Engine:
    """One Archive on one thread. Calls run there one at a time, in order of arrival."""

    def __init__(self, store: str | None, model: str | None, threads: int | None):
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="epi-engine")
        self.archive = Archive(store, model, threads, warn=lambda message: log.warning(message),
                               record_retrievals=False)
        self._lock: asyncio.Lock | None = None
        self.waiting = 0
        self.running: str | None = None
        self.loaded = False
        self._preloading = False

    # -- on the engine thread ---------------------------------------------------------------------------------

    def open(self) -> None:
        """The store, opened and checked now (a missing store fails `epi mcp` at once, with one line)."""
        self.pool.submit(lambda: self.archive._ready()).result()

    def preload(self) -> None:
        """The model and embedder, loaded in the background before the first question (once)."""
        if self._preloading:
            return
        self._preloading = True

        def load() -> None:
            try:
                self._load()
            except Exception as exc:  # said again, as a tool error, by the first question
                log.warning("loading the model failed: %s", exc)
        self.pool.submit(load)

    def _load(self) -> None:
        if not self.loaded:
            started = time.perf_counter()
            self.archive.load()
            self.loaded = True
            log.info("model and embedder loaded in %.1f s", time.perf_counter() - started)

    def close(self) -> None:
        self.pool.submit(self.archive.close).result()
        self.pool.shutdown()

    # -- from the event loop --------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def turn(self, ctx: Context | None, what: str) -> AsyncIterator[Notes]:
        """The engine for one call: at once if it is free, else after the calls before it, the wait reported."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        notes = Notes(ctx)
        waited_from = None
        if self._lock.locked():
            self.waiting += 1
            waited_from = time.perf_counter()
            ahead = f"{self.running or 'another request'} is running" + (
                f", {self.waiting - 1} more before this one" if self.waiting > 1 else "")
            await notes.say(f"{STATUS}waiting for epi's model: {ahead}; this {what} starts when it is free")
        try:
            await self._lock.acquire()
        finally:
            if waited_from is not None:
                self.waiting -= 1
        try:
            if waited_from is not None:
                await notes.say(f"{STATUS}waited {time.perf_counter() - waited_from:.1f} s; the {what} starts now")
            self.running = what
            yield notes
        finally:
            self.running = None
            self._lock.release()

    async def call(self, ctx: Context | None, what: str, fn: Callable[[Archive], Any]) -> Any:
        async with self.turn(ctx, what):
            return await asyncio.wrap_future(self.pool.submit(fn, self.archive))

    async def ask(self, ctx: Context | None, request: AskRequest) -> Answer:
        """The answer, its text streamed to the caller as progress notifications while it is generated."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        stop = threading.Event()

        def work(archive: Archive) -> None:
            def put(item: object) -> None:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            try:
                self._load()
                for piece in archive.ask_stream(request, should_stop=stop.is_set,
                                                on_begin=lambda result: put(_Status(reading(result)))):
                    put(piece)
            except BaseException as exc:  # noqa: BLE001 - carried to the event loop, raised there
                put(_Failure(exc))
            put(_DONE)

        async with self.turn(ctx, "question") as notes:
            job = asyncio.wrap_future(self.pool.submit(work, self.archive))
            answer: Answer | None = None
            text, shown, sent_at = "", "", 0.0
            try:
                while True:
                    item = await queue.get()
                    if item is _DONE:
                        break
                    if isinstance(item, _Failure):
                        raise item.exc
                    if isinstance(item, Answer):
                        answer = item
                    elif isinstance(item, _Status):
                        await notes.progress(item.message)
                    elif isinstance(item, SecondLook):  # the answer begins again: the progress shows the new one
                        text, shown = "", ""
                        await notes.progress("no sentence of the sources holds that answer; reading the best "
                                             "passages again")
                    else:
                        text += item
                        now = time.perf_counter()
                        if text.strip() and (not shown or now - sent_at >= PROGRESS_EVERY_S):
                            shown, sent_at = text, now
                            await notes.progress(text)
                if text.strip() and text != shown:
                    await notes.progress(text)
                await job
            except BaseException:
                stop.set()  # a cancelled request stops its generation; the next call waits for the thread anyway
                raise
        assert answer is not None
        return answer


class Notes:
    """What one call tells its caller while it runs: progress notifications (when the caller asked for progress,
    numbered 1, 2, 3... as the protocol wants them increasing), each also a log message for status lines."""

    def __init__(self, ctx: Context | None):
        self.ctx = ctx
        self.sent = 0

    async def progress(self, message: str) -> None:
        if self.ctx is None:
            return
        self.sent += 1
        with contextlib.suppress(Exception):  # a client that went away must not fail the call
            await self.ctx.report_progress(self.sent, None, message)

    async def say(self, message: str) -> None:
        """A status line: a progress notification and a log message (for clients that asked for no progress)."""
        log.info(message)
        await self.progress(message)
        if self.ctx is None:
            return
        with contextlib.suppress(Exception), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # logging is deprecated in the newest protocol, still read by clients
            await self.ctx.info(message)


def reading(result) -> str:
    """The status line of a question whose sources are chosen: what the answer reads."""
    if result.reading:
        return f"{STATUS}{result.reading}"
    n = len(result.retrieved)
    tokens = sum(r.n_tokens for r in result.retrieved)
    where = f" of {result.scope.described}" if result.scope is not None and result.scope.described else ""
    return f"{STATUS}reading {n} passage{'s' if n != 1 else ''}{where} ({tokens:,} tokens)"


# ------------------------------------------------------------------------------------------------ rendering


def _result(text: str, data: dict) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def hits_text(hits: list[Hit]) -> str:
    if not hits:
        return "no passages match"
    lines = []
    for i, h in enumerate(hits, 1):
        mark = "" if h.rank is not None else " (neighbour)"
        lines.append(f"[{i}] {h.citation} · event {h.event_id}{mark}\n    {h.excerpt}")
    return "\n".join(lines)


def quote_line(q: Quote) -> str:
    """A quote as the caller reads it, its whitespace squashed (Quote.quote keeps the source's line breaks), then
    where it is."""
    return f"“{' '.join(q.quote.split())}” ({q.citation}" + (f", event {q.event_id})" if q.event_id is not None
                                                               else ")")


def answer_text(a: Answer) -> str:
    parts = [a.text or "(no answer)"]
    if len(a.sentences) > 1:
        backed = sum(s.supported for s in a.sentences)
        lines = [f"Evidence, sentence by sentence ({backed} of {len(a.sentences)} supported):"]
        for s in a.sentences:
            unchecked = " (quote not checked by the model)" if s.supported and s.checked is False else ""
            lines.append(f"{'✓' if s.supported else '?'} {s.sentence}{unchecked}")
            lines += [f"   {quote_line(q)}" for q in s.quotes]
            if s.doubted:
                lines.append("   the closest quote may not say this; read it before trusting the sentence")
            elif not s.supported:
                lines.append("   no sentence in the sources holds this")
        parts.append("\n".join(lines))
    else:
        head = "Evidence:" if a.supported else ("Not supported by the sources: no sentence in them holds what this "
                                                "answer says; read the passages below before trusting it." +
                                                ("\nClosest to the question:" if a.evidence else ""))
        parts.append("\n".join([head] + [quote_line(q) for q in a.evidence]))
    notes = [n for n in (a.reading, a.search and f"searched as: {a.search}",
                         a.scope and f"searched {a.scope} only") if n] + a.notes
    if notes:
        parts.append("\n".join(notes))
    if a.sources:
        parts.append("Sources:\n" + "\n".join(
            f"[{s.number}] {s.citation}" + (f" · event {s.event_id}" if s.event_id is not None else "") +
            f"\n    {s.excerpt}" for s in a.sources))
    else:
        parts.append("no sources: the store has no events that match")
    return "\n\n".join(parts)


def events_text(events: list[Event]) -> str:
    out = []
    for e in events:
        mark = "" if e.requested else " (neighbour)"
        out.append(f"event {e.event_id}{mark} · {e.citation} · {e.tokens:,} tokens\n{e.text.rstrip()}")
    return "\n\n---\n\n".join(out)


def documents_text(docs: list[Document]) -> str:
    if not docs:
        return "the store is empty; add files with `epi ingest PATH`"
    lines = []
    for d in docs:
        extent = f"{d.pages} pages" if d.pages else f"{d.lines:,} lines" if d.lines else \
            f"{d.blocks:,} blocks" if d.blocks else ""
        state = "" if d.status == "complete" else f" ({d.status})"
        lines.append(f"{d.name}{state} · {d.format}" + (f", {extent}" if extent else "") +
                     f" · {d.tokens:,} tokens, {d.events:,} events · outline: epi://outline/{d.id}")
    return "\n".join(lines)


def summaries_text(found: list[Summary]) -> str:
    return "\n\n".join(f"{s.citation}" + (" (stale: the document changed since)" if s.stale else "") +
                       f"\n{s.text}" for s in found)


# ------------------------------------------------------------------------------------------------ the server


class EpiServer(MCPServer):
    """MCPServer whose resources are the store's documents as they are now (an ingest may add some meanwhile)."""

    def __init__(self, engine: Engine, **kwargs):
        super().__init__(**kwargs)
        self.engine = engine

    async def list_resources(self) -> list[Resource]:
        docs = await self.engine.call(None, "list of outlines", lambda a: a.documents())
        return [Resource(uri=OUTLINE_URI.format(document_id=d.id), name=f"outline of {d.name}",
                         description=f"{d.name}: its chapters, sections and code symbols, with the pages or lines and "
                                     "the event ids each spans", mime_type="text/plain") for d in docs]


def failed(message: str) -> CallToolResult:
    """A tool error (isError) holding exactly `message`: raising ToolError would prefix the SDK's own words."""
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def tool_call(fn):
    """A tool body whose failures come back as tool errors: a user's (EpiError, StoreError) with the one line the
    CLI prints for it, anything else with its type and message (and its traceback in the server's log)."""
    import functools

    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        try:
            return await fn(*args, **kwargs)
        except (EpiError, StoreError) as exc:
            log.info("%s: %s", fn.__name__, exc)
            return failed(error_line(exc))
        except Exception as exc:
            log.exception("%s failed", fn.__name__)
            return failed(f"error: {type(exc).__name__}: {exc}")

    return wrapper


def build_server(engine: Engine, name: str = "epi") -> EpiServer:
    @contextlib.asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[dict]:
        # The model loads once the transport holds stdout: whatever llama.cpp might print cannot reach the wire.
        engine.preload()
        yield {}

    server = EpiServer(engine, name=name, version=__version__, instructions=INSTRUCTIONS, log_level="WARNING",
                       lifespan=lifespan)

    @server.tool(annotations=READ_ONLY, structured_output=False)
    @tool_call
    async def search(query: str, k: int = DEFAULT_K, doc: str | None = None, ctx: Context = None) -> CallToolResult:
        """Find the passages (events) of the archive that match `query`: dense similarity and exact-term search,
        best first. Each comes with its citation (document, chapter or symbol, pages or lines), an excerpt and its
        event id, which `read_event` reads whole. `k`: how many (1-50); `doc`: only documents matching this glob
        (a file name such as `book.pdf`, or `src/*.py`)."""
        whole_number(k, "k", 1, MAX_K)  # out of range: the caller's error, not moved into it
        hits = await engine.call(ctx, "search", lambda a: a.search(query, k, doc or None))
        return _result(hits_text(hits), {"hits": [h.as_json() for h in hits]})

    @server.tool(annotations=READ_ONLY, structured_output=False)
    @tool_call
    async def ask(question: str, doc: str | None = None,
                  read: Literal[READ_CHOICES] = DEFAULT_READ, k: int = DEFAULT_K,
                  answer_tokens: int | None = None, ctx: Context = None) -> CallToolResult:
        """Answer a question from the archive with a local model, citing the pages or lines used: the answer, the
        quotes of the sources that support it (or a plain statement that none does) and the sources read, with
        their event ids. The answer streams as progress notifications. `read`: `lookup` reads the best few
        passages; `whole` the part the question names (a chapter, section, file, class) whole; `overview` the
        map's summaries of documents (questions about a whole book or codebase); `auto` chooses from the question.
        `doc`: only documents matching this glob. `k`: passages found by similarity (1-50). `answer_tokens`: the
        most tokens the answer may take, for a shorter answer sooner (default and most: 256, 384 reading a whole
        part or the map, up to 1,024 for a question about each part in turn)."""
        whole_number(k, "k", 1, MAX_K)  # out of range: the caller's error, not moved into it
        request = AskRequest.build(question, doc=doc or None, read=read, k=k, answer_tokens=answer_tokens)
        answer = await engine.ask(ctx, request)
        log.info("answered in %.2f s (first token %.2f s)", answer.timings.total_s, answer.timings.first_token_s)
        return _result(answer_text(answer), answer.as_json())

    @server.tool(annotations=READ_ONLY, structured_output=False)
    @tool_call
    async def read_event(id: int, neighbours: int = 0, ctx: Context = None) -> CallToolResult:
        """Read one event (a passage of a document, as `search` and `ask` name them by id) whole, with up to
        `neighbours` events before and after it (0-5), in document order."""
        whole_number(neighbours, "neighbours", 0, MAX_NEIGHBOURS)
        events = await engine.call(ctx, "read_event", lambda a: a.read_event(id, neighbours))
        return _result(events_text(events), {"events": [e.as_json() for e in events]})

    @server.tool(annotations=READ_ONLY, structured_output=False)
    @tool_call
    async def list_documents(ctx: Context = None) -> CallToolResult:
        """The documents in the archive: name, format, length, tokens, events, and the URI of each one's outline."""
        docs = await engine.call(ctx, "list_documents", lambda a: a.documents())
        return _result(documents_text(docs), {"documents": [d.as_json() for d in docs]})

    @server.tool(annotations=READ_ONLY, structured_output=False)
    @tool_call
    async def summary(document: str | None = None, part: str | None = None, ctx: Context = None) -> CallToolResult:
        """The map's summaries (written by `epi map`): with no argument, each collection's and document's; with
        `document` (a name or glob), that document's summary and its parts'; with `part` too (`ch. 3`,
        `chapter 3`, `2.4`, a title's words), the summary of that part."""
        found = await engine.call(ctx, "summary", lambda a: a.summary(document or None, part or None))
        return _result(summaries_text(found), {"summaries": [s.as_json() for s in found]})

    @server.resource(OUTLINE_URI, name="outline", mime_type="text/plain",
                     description="A document's outline: chapters, sections and code symbols, with the pages or lines "
                                 "and the event ids each spans (`list_documents` gives each document's id)")
    async def outline(document_id: str) -> str:
        try:
            if not (document_id.isascii() and document_id.isdigit()):
                raise NotFound(f"no document {document_id!r}: an outline is named by a document's id, a whole number "
                               "(`list_documents` gives them)")
            return await engine.call(None, "outline", lambda a: a.outline(int(document_id)).text())
        except NotFound as exc:
            raise ResourceNotFoundError(error_line(exc)) from exc
        except (EpiError, StoreError) as exc:
            raise ResourceError(error_line(exc)) from exc

    return server


def serve(store: str | None, model: str | None, threads: int | None, http_port: int | None = None) -> None:
    """Run the server until its client closes stdin (stdio) or it is stopped (HTTP on 127.0.0.1:http_port)."""
    engine = Engine(store, model, threads)
    engine.open()
    server = build_server(engine)
    try:
        if http_port is None:
            asyncio.run(server.run_stdio_async())
        else:
            print(f"epi mcp: serving store {engine.archive.store_dir} at http://127.0.0.1:{http_port}/mcp",
                  file=sys.stderr, flush=True)
            asyncio.run(server.run_streamable_http_async(host="127.0.0.1", port=http_port))
    finally:
        engine.close()
