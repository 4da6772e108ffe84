"""epi as a Python library: `Archive`, one store with its model, embedder and index held between calls.

    from episodic_cli import Archive

    with Archive("books") as archive:             # a store name or path (default: `default`, or $EPI_STORE)
        answer = archive.ask("Where did Orla Venn hide the key?")
        print(answer.text)
        for quote in answer.evidence:
            print(quote.quote, "--", quote.citation)
        for piece in archive.ask_stream("and who saw her?", history=[answer]):
            print(piece if isinstance(piece, str) else "", end="")   # tokens, then the Answer last

Every method returns plain dataclasses (`as_json()` gives their dict) and raises `EpiError` or `StoreError` with the
one-line message `epi` prints. Nothing here draws on a terminal: the CLI (`epi ask`) and the MCP server (`epi mcp`)
are thin layers over this module, which in turn is a thin layer over engine.workspace.Workspace.

An Archive belongs to the thread that first uses it (its SQLite connection and llama.cpp contexts are not shared
between threads); `epi mcp` runs every call of its one Archive on one engine thread.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .engine.answer.map_writer import MapProgress
from .engine.answer.records import SecondLook
from .engine.ask_options import DEFAULT_K, AskOptions, AskRequest, check_question_length
from .engine.documents.blocks import BLOCK_KINDS
from .engine.documents.sources import Skipped, discover, document_format
from .engine.documents.structure import all_paths, describe, describe_node, number_value, parse_heading
from .engine.documents.structure import decode as decode_section
from .engine.errors import EpiError, NotFound
from .engine.ingest.document_pass import DEFAULT_COMMIT_EVERY
from .engine.ingest.pipeline import IngestProgress, IngestResult
from .engine.ingest.segment import SegmentParams
from .engine.kv.keeper import DEFAULT_KIND
from .engine.llama.models import answer_model as chosen_answer_model
from .engine.llama.models import plan_ingest
from .engine.retrieval.citations import citation, place, printable
from .engine.retrieval.retrieve import RetrievedEvent
from .engine.retrieval.scope import documents_matching
from .engine.workspace import AskResult as EngineResult
from .engine.workspace import Workspace
from .store import Store, StoreError
from .store.summaries import COLLECTION, DOCUMENT, PART, SummaryRecord, current_collections

__all__ = ["Archive", "Answer", "Quote", "SentenceEvidence", "Source", "Timings", "Hit", "Event", "Document",
           "Summary", "Outline", "OutlineNode", "IngestReport", "IngestResult", "SecondLook", "EpiError", "StoreError"]

log = logging.getLogger("episodic_cli")
# The version of Answer's JSON form (`epi ask --json`, Archive.ask, `epi mcp`'s ask; docs/answer.schema.json): raised
# when a field is renamed, removed or changes its meaning, so a reader can tell which form it holds.
ANSWER_SCHEMA_VERSION = 1
SEARCH_TOKENS = 1 << 30  # search() returns its k hits whatever their length (an answer's sources are cut to a budget)
EXCERPT_CHARS = 300


_SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
               "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str) -> int:
    """'500MB', '20GB', '1.5GiB', '0' -> bytes (decimal units as disks are sold; KiB/MiB/GiB binary)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match and _SIZE_UNITS.get(match.group(2).lower())
    if not match or unit is None:
        raise EpiError(f"cannot read the size {text!r}: write it like 500MB, 20GB or 1.5GiB")
    size = float(match.group(1)) * unit
    if size >= 2**63:  # past what the store records (and any disk): '1e400' was a float infinity, a traceback
        raise EpiError(f"the size {text.strip()[:24]}{'...' if len(text.strip()) > 24 else ''} is larger than any "
                       "disk; write it like 500MB, 20GB or 1.5GiB")
    return int(size)


def unknown_event(event_id: int, store_dir: Path) -> str:
    """What `epi show` and `read_event` say about an event id the store does not hold."""
    return f"no event {event_id} in store {store_dir}; `epi ask --json` lists event ids"


def unmatched_documents(globs: list[str]) -> str:
    return f"--doc {' '.join(globs)} matches no document in the store; `epi ls` lists them"


def check_doc_globs(st: Store, globs: list[str] | None) -> None:
    if globs and not documents_matching(st, globs):
        raise EpiError(unmatched_documents(globs))


def nothing_to_ingest(skipped: list[Skipped]) -> str:
    if not skipped:
        return "nothing to ingest: no readable files under the given paths"
    reasons = "; ".join(f"{s.path}: {s.reason}" for s in skipped[:3])
    more = f"; and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    return f"nothing to ingest: {reasons}{more}"


# ------------------------------------------------------------------------------------------------ records


class _Record:
    def as_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class Quote(_Record):
    """A sentence of the sources that supports an answer, with where it is: `quote` is the source's text exactly
    (its line breaks too, which its lines count), so a reader squashes its whitespace to show it."""

    quote: str
    citation: str                 # "keeper.pdf, p. 3" or "notes.txt, lines 120-121"
    document: str
    event_id: int | None          # None: the quote is from a map summary
    page_start: int | None = None
    page_end: int | None = None
    line_start: int | None = None
    line_end: int | None = None
    # [start, end) offsets in `quote` of the words it shares with the answer (and question): what `epi ask` marks
    highlight: list[list[int]] = field(default_factory=list)


@dataclass
class SentenceEvidence(_Record):
    """One sentence of an answer and the quotes that support it (none: no sentence of the sources holds it).
    `doubted`: a quote was found, but the answer model doubts it states the sentence; `supported` is then false and
    `quotes` holds the closest one. `checked`: whether the answer model read the quote beside the sentence (None:
    no check applies; False: one applied and did not run, so `supported` rests on shared words alone)."""

    sentence: str
    supported: bool
    quotes: list[Quote] = field(default_factory=list)
    doubted: bool = False
    checked: bool | None = None
    coverage: float = 0.0         # the weighted share of the sentence's own words that its quotes hold


@dataclass
class Source(_Record):
    """A passage the answer read: an event (or a summary of the map), numbered as `epi ask` shows it."""

    number: int
    citation: str                 # 'keeper.pdf, ch. 2 "The Stair", p. 3'
    document: str
    event_id: int | None          # None for a summary of the map
    excerpt: str
    text: str
    section: str | None = None
    page_start: int | None = None
    page_end: int | None = None
    line_start: int | None = None
    line_end: int | None = None
    score: float | None = None    # the retrieval score of a hit; None for a neighbour or a part read whole
    summary_of: str | None = None  # a summary: what it covers


@dataclass
class Timings(_Record):
    """Seconds from the question (retrieval start): retrieval, prefill, first answer token, whole answer; and to the
    first progress of events prepared from text (None: none were)."""

    retrieve_s: float = 0.0
    prefill_s: float = 0.0
    first_token_s: float = 0.0
    total_s: float = 0.0
    progress_s: float | None = None


@dataclass
class PlanStep(_Record):
    """One step of the plan an answer followed (engine/ask_plan.py), in the order tried: a way of reading, why the
    plan has it, and what became of it: "answered", "gave way" or "skipped" (`why_not` says why), or "not tried"."""

    way: str                      # "each_part", "whole", "named_whole", "overview", "explain" or "lookup"
    reason: str
    outcome: str
    why_not: str | None = None


@dataclass
class Answer(_Record):
    """An answer, the one record every face gives: `Archive.ask`, `epi ask --json` and `epi mcp`'s ask all write
    as_json(), whose form docs/answer.schema.json describes (its `schema_version`: ANSWER_SCHEMA_VERSION)."""

    question: str
    text: str
    kind: str                     # "lookup" (a few passages), "whole" (a named part read whole), "overview" (the map)
    mode: str                     # "kv" (stored KV blocks) or "text"
    supported: bool               # the sources hold it: half its words, or half its sentences (docs/usage.md)
    evidence: list[Quote]
    sentences: list[SentenceEvidence]
    sources: list[Source]
    timings: Timings
    short: str | None = None      # the evidence span a factual answer starts with
    reading: str | None = None    # what a whole or overview answer read ("read all of ch. 12, 7,930 tokens")
    scope: str | None = None      # what retrieval was restricted to ("ch. 3", "util.py")
    search: str | None = None     # what retrieval looked for, when not the question (a follow-up's rewrite)
    left_out: list[int] = field(default_factory=list)  # retrieved events not read: no KV block yet, no time
    notes: list[str] = field(default_factory=list)     # warnings said while answering
    # the answer set aside by a second look: no sentence of the sources held its words, and `text` is the answer
    # read again from the passages that match the question best
    first_answer: str | None = None
    narrowed: bool = False        # it read only the sentences that match the question best, not the events whole
    retrieved_tokens: int = 0     # the tokens of the sources
    # kv mode (None in text mode): the sources' tokens loaded from stored KV blocks, and prefilled from text
    kv_loaded_tokens: int | None = None
    kv_prefilled_tokens: int | None = None
    layered: dict | None = None   # --layered: the pool loaded and, per layer, how many of its blocks it selected
    left_out_tokens: int = 0      # the tokens of the `left_out` events
    # of the sources without a KV block, those read only as their sentences that match the question (for time)
    read_as_sentences: list[int] = field(default_factory=list)
    # the ways of reading planned for it, in order, and which one answered (None: answered without a plan)
    plan: list[PlanStep] | None = None

    def as_json(self) -> dict:
        return {"schema_version": ANSWER_SCHEMA_VERSION, **super().as_json()}

    def __str__(self) -> str:
        return self.text


@dataclass
class Hit(_Record):
    """A search result: an event with its citation, an excerpt and its id (for `read_event`)."""

    event_id: int
    citation: str
    document: str
    excerpt: str
    text: str
    rank: int | None              # 0: the best hit; None: a neighbour of one
    score: float | None
    section: str | None = None
    page_start: int | None = None
    page_end: int | None = None
    line_start: int | None = None
    line_end: int | None = None


@dataclass
class Event(_Record):
    event_id: int
    document: str
    ordinal: int                  # its place in the document (0: first)
    citation: str
    tokens: int
    text: str
    requested: bool               # False: a neighbour of the event asked for
    section: str | None = None
    page_start: int | None = None
    page_end: int | None = None
    line_start: int | None = None
    line_end: int | None = None


@dataclass
class Document(_Record):
    id: int                       # the outline resource's id (`epi mcp`: epi://outline/ID)
    name: str                     # as `epi ls` shows it (and --doc / doc= match)
    path: str                     # as stored (the file's absolute path)
    kind: str
    format: str
    tokens: int
    events: int
    pages: int | None
    lines: int | None
    blocks: int | None            # EPUB, HTML and Word are cited by numbered block
    status: str                   # "complete", or "partial" while an ingest commits it group by group


@dataclass
class Summary(_Record):
    """A summary of the map (`epi map`): of a part (chapter, section, code file), a document or a collection."""

    level: str                    # "section" (inside a part), "part", "document" or "collection"
    label: str                    # what it covers: 'ch. 3 "The Betrayal"', 'lines 1-40', 'src/'
    document: str | None          # None: a collection's
    citation: str
    text: str
    model: str
    stale: bool                   # the document changed since it was written (`epi map` writes it again)
    page_start: int | None = None
    page_end: int | None = None
    line_start: int | None = None
    line_end: int | None = None


@dataclass
class OutlineNode(_Record):
    kind: str                     # chapter, part, appendix, section, or a code keyword (class, def, fn, ...)
    number: str | None
    title: str
    label: str                    # as citations name it: 'ch. 3 "The Betrayal"', '§ 2.4', 'class Cache'
    depth: int
    first_event: int
    last_event: int
    events: int
    page_start: int | None = None
    page_end: int | None = None
    line_start: int | None = None
    line_end: int | None = None
    children: list[OutlineNode] = field(default_factory=list)


@dataclass
class Outline(_Record):
    """A document's structure as its events record it: chapters and sections of prose, classes and functions of
    code, each with the pages or lines and the events it spans."""

    document: str
    kind: str
    format: str
    tokens: int
    events: int
    pages: int | None
    lines: int | None
    nodes: list[OutlineNode]

    def text(self) -> str:
        """The outline as indented lines, one a node: `ch. 3 "The Betrayal" — pp. 41-55 · events 118-140`."""
        extent = f"{self.pages} pages" if self.pages else (f"{self.lines:,} lines" if self.lines else "")
        head = f"{self.document} ({', '.join(p for p in (self.format, extent) if p)}; {self.tokens:,} tokens, " \
               f"{self.events:,} events)"
        lines = [head]

        def walk(nodes: list[OutlineNode]) -> None:
            for n in nodes:
                where = place(self.kind, n.page_start, n.page_end, n.line_start, n.line_end)
                ids = f"event {n.first_event}" if n.first_event == n.last_event else \
                    f"events {n.first_event}-{n.last_event}"
                lines.append(f"{'  ' * n.depth}- {n.label}" + (f" — {where}" if where else "") + f" · {ids}")
                walk(n.children)

        walk(self.nodes)
        if not self.nodes:
            lines.append("(no chapters, sections or code symbols were found in it)")
        return "\n".join(lines)


@dataclass
class IngestReport(_Record):
    """What `Archive.ingest` did: per file (ingested, unchanged, skipped, failed), then the answer model's blocks
    and the map of the new documents, when they were made."""

    documents: list[dict]
    warm: dict | None = None
    map: dict | None = None

    @property
    def ok(self) -> bool:
        return not any(d["status"] == "failed" for d in self.documents) and \
            not all(d["status"] == "skipped" for d in self.documents)


def _squashed(text: str, limit: int = EXCERPT_CHARS) -> str:
    text = " ".join(text.split())
    return text[:limit] + ("…" if len(text) > limit else "")


def _quote_citation(r: RetrievedEvent, e) -> str:
    """As `epi ask` shows a quote's origin: the document with the quote's own page or lines."""
    if r.summary is not None:
        return citation(r)
    name = printable(r.document.display_path)
    where = place(r.document.kind, e.page, e.page_end, e.line_start, e.line_end)
    return f"{name}, {where}" if where else name


def _quote(result: EngineResult, e) -> Quote:
    r = result.retrieved[e.index]
    return Quote(quote=e.quote, citation=_quote_citation(r, e), document=r.document.display_path,
                 event_id=None if r.summary is not None else r.event.id, page_start=e.page, page_end=e.page_end,
                 line_start=e.line_start, line_end=e.line_end, highlight=[[a, b] for a, b in e.highlight])


def answer_of(result: EngineResult, notes: list[str] | None = None) -> Answer:
    """The public record of a finished engine answer (Workspace.ask's AskResult, its stream consumed), the one every
    face writes or renders. It reads the quotes as they are: run `result.verify()` first to have the answer model
    check them (building the record never runs the model)."""
    found = result.support()
    sources = []
    for i, r in enumerate(result.retrieved, 1):
        ev = r.event
        sources.append(Source(
            number=i, citation=citation(r), document=r.document.display_path,
            event_id=None if r.summary is not None else ev.id, excerpt=_squashed(ev.text), text=ev.text,
            section=None if r.summary is not None else describe(r.section), page_start=ev.page_start,
            page_end=ev.page_end, line_start=ev.line_start, line_end=ev.line_end,
            score=None if r.score is None else round(float(r.score), 6),
            summary_of=None if r.summary is None else r.summary.label))
    a = result.answer
    kv = result.mode == "kv"
    return Answer(
        question=result.question, text=a.text.strip(), kind=result.kind.value, mode=result.mode,
        supported=result.supported(), evidence=[_quote(result, e) for e in found.evidence],
        sentences=[SentenceEvidence(s.sentence, s.supported, [_quote(result, e) for e in s.evidence], s.doubted,
                                   s.checked, s.coverage)
                   for s in result.sentence_support()],
        sources=sources, timings=Timings(**a.timings.as_json()),
        short=a.short, reading=result.reading,
        scope=None if result.scope is None else result.scope.described, search=result.search,
        left_out=[r.event.id for r in result.left_cold],
        first_answer=None if result.first_answer is None else result.first_answer.text.strip(),
        notes=list(notes or []) + (list(result.scope.notes) if result.scope is not None else []),
        narrowed=bool(result.focus), retrieved_tokens=sum(r.n_tokens for r in result.retrieved),
        kv_loaded_tokens=a.kv_loaded_tokens if kv else None, kv_prefilled_tokens=a.kv_prefilled_tokens if kv else None,
        layered=None if a.layered is None else a.layered.as_json(),
        left_out_tokens=sum(r.n_tokens for r in result.left_cold),
        read_as_sentences=[r.event.id for r in result.cold_passages],
        plan=None if result.plan is None else [PlanStep(**s) for s in result.plan_steps()])


def _history(history: Iterable | None) -> list[dict[str, str]] | None:
    """Earlier turns as the engine reads them: {"role", "content"} dicts, (question, answer) pairs or Answers."""
    if not history:
        return None
    turns: list[dict[str, str]] = []
    for item in history:
        if isinstance(item, Answer):
            turns += [{"role": "user", "content": item.question}, {"role": "assistant", "content": item.text}]
        elif isinstance(item, dict) and {"role", "content"} <= item.keys() and item["role"] in ("user", "assistant"):
            turns.append({"role": str(item["role"]), "content": str(item["content"])})
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            question, answer = item
            turns += [{"role": "user", "content": str(question)}, {"role": "assistant", "content": str(answer)}]
        else:
            raise EpiError(f"history holds {str(item)[:60]!r}: give earlier turns as Answers, (question, answer) "
                           'pairs or {"role": "user" or "assistant", "content": ...} dicts')
    return turns or None


MAX_ID = 2**63 - 1          # SQLite's integers: an id past it names nothing
MAX_SEARCH_K = 1000         # hits a search returns at most (an answer reads 5 by default)
MAX_NEIGHBOURS = 50         # events either side of a hit or an event read


def whole_number(value, name: str, low: int, high: int) -> int:
    """`value` as a whole number from `low` to `high`, or an EpiError that says so (a digit string counts)."""
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise EpiError(f"{name} must be a whole number from {low:,} to {high:,}, not {value!r}")
    return value


# ------------------------------------------------------------------------------------------------ Archive


class Archive:
    """One store, its answer model, embedder and dense index loaded when first needed and kept between calls.

    `store`: a store name (kept under epi's data directory) or a path (None: $EPI_STORE or `default`); `model`: the
    answer model (a GGUF file or `qwen-1.5b`, `qwen-0.5b`, `smollm2`; None: $EPI_MODEL or the default); `threads`:
    llama.cpp's CPU threads (None: the physical cores). `warn(message)` hears what `epi` prints as warnings (default:
    the `episodic_cli` logger); `on_prepare(done, total)` the tokens of events prepared from text before an answer.
    `record_retrievals`: count each answer's events in the store's retrievals.log, as `epi ask` does (the order `epi
    warm` prepares blocks in); False writes nothing to the store but KV blocks under its budget (`epi mcp`).
    """

    def __init__(self, store: str | Path | None = None, model: str | None = None, threads: int | None = None, *,
                 warn: Callable[[str], None] | None = None,
                 on_prepare: Callable[[int, int], None] | None = None, record_retrievals: bool = True):
        self.model_choice = model
        self.threads = threads
        self._warn_to = warn or log.warning
        self._notes: list[str] | None = None
        self.workspace = Workspace(model, None if store is None else str(store), threads, warn=self._warn,
                                   on_prepare=on_prepare)
        self.workspace.record_retrievals = record_retrievals
        self._store: Store | None = None
        self._checked = False
        self._thread: int | None = None
        self._answering = False  # an ask_stream() not yet read to its end: the model's context is its

    # -- the store and the models --------------------------------------------------------------------------

    @property
    def store_dir(self) -> Path:
        return self.workspace.store_dir

    @property
    def store(self) -> Store:
        """The store, opened on first use (StoreError when there is none: `epi ingest` or `ingest()` first)."""
        self._check_thread()
        if self._store is None:
            self._store = Store.open_existing(self.store_dir)
        return self._store

    def _check_thread(self) -> None:
        me = threading.get_ident()
        if self._thread is None:
            self._thread = me
        elif self._thread != me:
            raise EpiError("this Archive was opened in another thread: use one Archive per thread, or run every call "
                           "on one thread (as `epi mcp` does)")

    def _not_answering(self) -> None:
        if self._answering:
            raise EpiError("an answer is still being read from this Archive: read its stream to the end or close it "
                           "first (one question at a time: they share the model's context)")

    def _warn(self, message: str) -> None:
        if self._notes is not None:
            self._notes.append(message)
        self._warn_to(message)

    def _ready(self) -> Store:
        """The store, checked against the embedder the answers need (once), with what other processes committed
        since it was opened (an ingest running beside a long-lived Archive commits document after document)."""
        st = self.store
        if not self._checked:
            self.workspace.check_store(st)
            self._checked = True
        else:
            st.refresh()
        return st

    def load(self, request: AskRequest | None = None) -> Archive:
        """Load the embedder and the answer model's context now rather than at the first question (the context
        `request` will be answered in: its mode, --layered and pool)."""
        st = self._ready()
        options = self.workspace.resolve(st, request.options if request is not None else AskOptions())
        if request is not None:
            self.workspace.layered_pool = request.pool or 0
        self.workspace.embedder.load(batches=False)
        self.workspace.answerer(options.mode, st, options.layered)
        return self

    def close(self) -> None:
        """Free the model's contexts and close the store (the Archive may be used again: it reopens them). From
        another thread than the one that opened the store, the store is let go instead (SQLite closes a connection
        only in its own thread; it closes when collected)."""
        try:
            self.workspace.close()
        finally:
            if self._store is not None and self._thread in (None, threading.get_ident()):
                self._store.close()
            self._store = None
            self._checked = False
            self._thread = None
            self._answering = False

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- questions -----------------------------------------------------------------------------------------

    def begin(self, request: AskRequest, *, should_stop: Callable[[], bool] | None = None
              ) -> tuple[EngineResult, Iterator[str]]:
        """The engine's side of a question: its result (filled in as the stream is read) and the answer stream.
        What `epi ask` renders; record() turns it into an Answer once the stream is read (ask() and ask_stream() do).
        `should_stop`, polled while generating, True stops the answer."""
        self._not_answering()
        self._notes = []  # the warnings said from here to record(): the Answer's notes
        st = self.check(request)
        return self.workspace.answer(st, request, should_stop=should_stop)

    def check(self, request: AskRequest) -> Store:
        """The request against the store, without loading a model: its --doc globs match documents, and its kv-only
        options the mode it will run in (the store's, when it names none). `epi ask` refuses a combination here,
        before the model loads. The store, ready and refreshed."""
        st = self._ready()
        check_doc_globs(st, list(request.options.docs or []))
        self.workspace.resolve(st, request.options)
        return st

    def ask_stream(self, question: str | AskRequest, on_begin: Callable[[EngineResult], None] | None = None, *,
                   history: Iterable | None = None, should_stop: Callable[[], bool] | None = None,
                   **options) -> Iterator[str | Answer]:
        """The answer's text as it is generated, piece by piece (str), then the finished Answer. A `SecondLook`
        piece (a str, a blank line) means that the text before it is set aside and the answer begins again (no
        sentence of the sources held its words; Answer.first_answer keeps it). Takes ask()'s options; closing the
        iterator early stops the generation. `on_begin(result)`: the engine's result once
        retrieval is done, before the answer is read and generated (what will be read: `result.retrieved`)."""
        self._not_answering()
        request = question if isinstance(question, AskRequest) else \
            AskRequest.build(question, history=_history(history), **options)
        try:
            result, stream = self.begin(request, should_stop=should_stop)
            self._answering = True
            if on_begin is not None:
                on_begin(result)
            try:
                yield from stream
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()
            result.verify()  # the answer model checks the quotes; before record(), as it may warn
            answer = self.record(result)
        finally:
            self._notes = None
            self._answering = False
        yield answer

    def record(self, result: EngineResult) -> Answer:
        """The Answer of a result from begin() whose stream was read, with the warnings said since begin() as its
        notes. It never runs the model: `result.verify()` first, to have the answer model check the quotes."""
        notes, self._notes = self._notes, None
        return answer_of(result, notes)

    def ask(self, question: str | AskRequest, *, history: Iterable | None = None, **options) -> Answer:
        """Answer `question` (or an AskRequest, engine/ask_options.py) from the store: the answer, the quotes that
        support it and the sources it read. The keywords, as `epi ask` names them, make the AskRequest:

        `k`: events found by similarity (their neighbours come too); `doc`: only documents matching this glob (or
        globs), as `--doc`; `read`: "auto" (the question decides), "lookup" (the best few passages), "whole" (the
        part the question names, whole) or "overview" (the map's summaries); `history`: earlier turns (Answers,
        (question, answer) pairs or {"role", "content"} dicts): the question is then a follow-up, rewritten into
        the standalone question it means for retrieval. More options, as `epi ask` names them: mode ("kv",
        "text"), neighbours, narrow, short, second_look, layered, pool, epman, cold_seconds, should_stop; and
        `answer_tokens`, the most tokens the answer may take (fewer than the default 256, 384 for a part read
        whole, or up to 1,024 for a question about each part in turn, cuts it short)."""
        answer = None
        for piece in self.ask_stream(question, history=history, **options):
            if isinstance(piece, Answer):
                answer = piece
        assert answer is not None
        return answer

    # -- the archive ---------------------------------------------------------------------------------------

    def search(self, query: str, k: int = DEFAULT_K, doc: str | list[str] | None = None,
               neighbours: int = 0) -> list[Hit]:
        """The events retrieval finds for `query` (dense + exact-term search, as an answer's), best first; with
        `neighbours`, each hit's adjacent events follow the hits (rank None). A query naming a chapter, page, file
        or symbol searches there, as a question does."""
        if not isinstance(query, str) or not query.strip():
            raise EpiError("the search is empty")
        check_question_length(query)
        k = whole_number(k, "k", 1, MAX_SEARCH_K)
        neighbours = whole_number(neighbours, "neighbours", 0, MAX_NEIGHBOURS)
        globs = [doc] if isinstance(doc, str) else list(doc) if doc else None
        st = self._ready()
        check_doc_globs(st, globs)
        found = self.workspace.retrieve(st, query, k, neighbours, docs=globs, token_budget=SEARCH_TOKENS)
        hits = sorted((r for r in found if r.rank is not None), key=lambda r: r.rank)[:k]
        hits += [r for r in found if r.rank is None]
        return [Hit(event_id=r.event.id, citation=citation(r), document=r.document.display_path,
                    excerpt=_squashed(r.event.text), text=r.event.text, rank=r.rank,
                    score=None if r.score is None else round(float(r.score), 6), section=describe(r.section),
                    page_start=r.event.page_start, page_end=r.event.page_end, line_start=r.event.line_start,
                    line_end=r.event.line_end) for r in hits]

    def read_event(self, event_id: int, neighbours: int = 0) -> list[Event]:
        """One event (as `epi show`), with up to `neighbours` events before and after it, in document order."""
        neighbours = whole_number(neighbours, "neighbours", 0, MAX_NEIGHBOURS)
        event_id = whole_number(event_id, "the event id", 1, MAX_ID)
        st = self._ready()
        events = st.get_events([event_id])
        if not events:
            raise NotFound(unknown_event(event_id, st.path))
        target = events[0]
        doc = st.get_document(target.document_id)
        out = []
        for ordinal in range(target.ordinal - neighbours, target.ordinal + neighbours + 1):
            ev = target if ordinal == target.ordinal else st.event_at(doc.id, ordinal) if ordinal >= 0 else None
            if ev is None:
                continue
            r = RetrievedEvent(ev, doc, None, None)
            out.append(Event(event_id=ev.id, document=doc.display_path, ordinal=ev.ordinal, citation=citation(r),
                             tokens=ev.token_end - ev.token_start, text=ev.text, requested=ev.id == target.id,
                             section=describe(decode_section(ev.section)), page_start=ev.page_start,
                             page_end=ev.page_end, line_start=ev.line_start, line_end=ev.line_end))
        return out

    def documents(self) -> list[Document]:
        """The documents in the store, as `epi ls` lists them."""
        st = self._ready()
        return [Document(id=d.id, name=d.display_path, path=d.path, kind=d.kind, format=document_format(d.kind, d.display_path),
                         tokens=d.n_tokens, events=d.n_events, pages=d.n_pages,
                         lines=None if d.kind in BLOCK_KINDS else d.n_lines,
                         blocks=d.n_lines if d.kind in BLOCK_KINDS else None, status=d.status)
                for d in st.documents()]

    def _document(self, st: Store, name: str | int):
        """The one document `name` (a display path, file name or glob, as --doc; or its id) names."""
        if isinstance(name, int):
            try:
                return st.get_document(whole_number(name, "the document id", 1, MAX_ID))
            except (KeyError, EpiError):
                raise NotFound(f"no document {name} in store {st.path}; `epi ls` lists them") from None
        matched = documents_matching(st, [name])
        if not matched:
            raise NotFound(f"no document matches {name!r} in store {st.path}; `epi ls` lists them")
        if len(matched) > 1:
            names = sorted(matched.values())
            raise EpiError(f"{name!r} matches {len(names)} documents ({', '.join(names[:5])}"
                           f"{', ...' if len(names) > 5 else ''}); name one")
        doc_id = next(iter(matched))
        return st.get_document(doc_id)

    def outline(self, document: str | int) -> Outline:
        """`document`'s chapters, sections and code symbols, from the structure its events record."""
        st = self._ready()
        doc = self._document(st, document)
        return outline_of(doc, st.event_places([doc.id]))

    def summary(self, document: str | None = None, part: str | None = None) -> list[Summary]:
        """The map's summaries (`epi map` writes them): with no argument, each collection's and document's; with
        `document`, its own and its parts'; with `part` too ("ch. 3", "chapter 3", "3", a title's words), the parts
        of that document it names."""
        st = self._ready()
        shelf = st.summaries()
        if shelf.count() == 0:
            raise EpiError("this store has no map yet; `epi map` writes the summaries of its parts and documents "
                           "(`epi ingest` writes them for new documents when an answer model is installed)")
        docs = {d.id: d for d in st.documents()}
        if document is None:
            if part is not None:
                raise EpiError("name the document the part belongs to")
            chosen = shelf.all(COLLECTION) + [s for s in shelf.all(DOCUMENT) if s.document_id in docs]
        else:
            doc = self._document(st, document)
            own = shelf.of_document(doc.id)
            if part is None:
                chosen = [s for s in own if s.level == DOCUMENT] + [s for s in own if s.level == PART]
            else:
                chosen = parts_named([s for s in own if s.level == PART], part)
                if not chosen:
                    labels = [s.label for s in own if s.level == PART]
                    raise EpiError(f"no part of {doc.display_path} matches {part!r} in the map; its parts: "
                                   f"{'; '.join(labels[:12]) or 'none'}{'; ...' if len(labels) > 12 else ''}")
        if not chosen:
            raise EpiError("the map has no summary of that yet; `epi map` writes it")
        folders = current_collections(list(docs.values()))
        return [summary_of(s, docs.get(s.document_id), folders) for s in chosen]

    # -- ingest --------------------------------------------------------------------------------------------

    def ingest(self, paths: Iterable[str | Path], *, reader: str | None = None, warm: bool = True,
               write_map: bool = True, kv: bool = True, kv_type: str = DEFAULT_KIND,
               kv_budget: int | str | None = None, commit_every: int = DEFAULT_COMMIT_EVERY,
               params: SegmentParams | None = None, progress: IngestProgress | None = None,
               warm_progress: Callable[[int, int], None] | None = None,
               map_progress: Callable[[MapProgress], None] | None = None) -> IngestReport:
        """Read files and folders into the store, as `epi ingest` does (the store is created when there is none):
        the reading model (`reader`, or $EPI_MODEL; by default this Archive's answer model where one is installed and
        `warm`, else the bundled SmolLM2) cuts them into events and keeps its KV blocks; then this Archive's answer
        model, where it did not read them, prepares its blocks for the new documents (`warm`), and writes their map
        (`write_map`). `kv_budget`: bytes or "20GB" (None: the
        store's, 10 GB for a new one); `kv=False` keeps text only. `progress` hears the pipeline's progress
        (engine/ingest/pipeline.py, IngestProgress)."""
        if isinstance(paths, (str, os.PathLike)):  # one path, not its characters (".", "/" and "a" were read)
            paths = [paths]
        found = list(discover([Path(p).expanduser() for p in paths]))
        if all(isinstance(f, Skipped) for f in found):
            raise EpiError(nothing_to_ingest(found))
        budget = 0 if not kv else None if kv_budget is None else parse_size(kv_budget) \
            if isinstance(kv_budget, str) else int(kv_budget)
        Store.refuse_if_being_written(self.store_dir)
        params = params or SegmentParams()
        plan = plan_ingest(reader, chosen_answer_model(self.model_choice) if warm else "none", kv, False, write_map)
        self._not_answering()
        self.workspace.close()  # the reader loads its own copy (one reader: the same model); one is enough in memory
        ws = Workspace(plan.reading, str(self.store_dir), self.threads, warn=self._warn)
        results: list[IngestResult] = []
        try:
            st = ws.store_for_writing(params)
            ws.embedder.load(batches=True)
            with ws.ingest_run(st, params, kv_type if kv else None, budget, commit_every,
                               keep_blocks=plan.reader_keeps_blocks) as ingestor:
                results += ingestor.ingest(found, progress)
        finally:
            ws.close()
        report = IngestReport([r.as_json() for r in results])
        new_docs = {r.path for r in results if r.status == "ingested"}
        st = self._ready()
        if new_docs and plan.prepares_blocks:
            report.warm = {"model": plan.answering, **self.workspace.warm(st, warm_progress, new_docs).as_json()}
        if new_docs and plan.writes_map:
            Store.refuse_if_being_written(self.store_dir)
            self.workspace.embedder.load(batches=False)
            report.map = {"model": plan.answering, **self.workspace.write_map(st, map_progress, new_docs).as_json()}
        return report


# ------------------------------------------------------------------------------------------------ helpers


def summary_of(s: SummaryRecord, doc, folders: dict[str, str]) -> Summary:
    """`folders`: the collections the store's documents make now (store.summaries.current_collections)."""
    from .engine.retrieval.summary_sources import summary_event

    r = summary_event(s, doc)
    if s.document_id is None:  # a collection's: stale once its folder's documents are not those it was written from
        stale = folders.get(s.key) != s.content_sha256
    else:
        stale = doc is None or doc.content_sha256 != s.content_sha256
    return Summary(level=s.level, label=s.label, document=None if s.document_id is None or doc is None
                   else doc.display_path, citation=citation(r), text=s.text, model=s.model, stale=stale,
                   page_start=s.page_start, page_end=s.page_end, line_start=s.line_start, line_end=s.line_end)


def parts_named(parts: list[SummaryRecord], asked: str) -> list[SummaryRecord]:
    """The part summaries `asked` names: the label itself, a chapter or section by number ("chapter 3", "ch. III",
    "2.4", "3"), or words of a title or symbol ("The Betrayal", "class Cache")."""
    text = " ".join(asked.split()).strip()
    low = text.lower()
    exact = [s for s in parts if s.label.lower() == low]
    if exact:
        return exact
    heading = parse_heading(text, strict=False)
    number = None
    kind = None
    if heading is not None and heading[1] is not None:
        kind, number = heading[0], number_value(heading[1])
    elif number_value(low.rstrip(".")) is not None and any(c.isdigit() for c in low):
        number = number_value(low.rstrip("."))
    elif low.startswith(("ch. ", "ch ")):
        number = number_value(low.split(None, 1)[1].split()[0])
        kind = "chapter"
    if number is not None:
        found = []
        for s in parts:
            try:
                path = json.loads(s.key.split(":", 2)[2])
            except (ValueError, IndexError):
                continue
            if any(isinstance(n, list) and len(n) == 3 and number_value(n[1]) == number
                   and (kind is None or n[0] == kind or kind == "section") for n in path):
                found.append(s)
        if found:
            return found
    return [s for s in parts if low in s.label.lower()]


def outline_of(doc, places: list[tuple]) -> Outline:
    """The outline of `doc` from its events' places: (event id, document id, ordinal, page_start, page_end,
    line_start, line_end, section) rows (Store.event_places)."""
    nodes: dict[str, OutlineNode] = {}
    roots: list[OutlineNode] = []
    for event_id, _doc, _ordinal, p0, p1, l0, l1, section in sorted(places, key=lambda row: row[2]):
        for path in all_paths(decode_section(section)):
            parent = None
            for depth in range(len(path)):
                key = json.dumps(path[: depth + 1], ensure_ascii=False)
                node = nodes.get(key)
                if node is None:
                    kind, number, title = path[depth]
                    node = nodes[key] = OutlineNode(kind=kind, number=number, title=title or "",
                                                    label=describe_node(path[depth]), depth=depth,
                                                    first_event=event_id, last_event=event_id, events=0,
                                                    page_start=p0, page_end=p1, line_start=l0, line_end=l1)
                    (parent.children if parent is not None else roots).append(node)
                elif node.last_event != event_id:
                    node.last_event = event_id
                    if p1 is not None:
                        node.page_end = max(node.page_end or p1, p1)
                    if l1 is not None:
                        node.line_end = max(node.line_end or l1, l1)
                parent = node
    _count_events(nodes, places)
    format_ = document_format(doc.kind, doc.display_path)
    return Outline(document=doc.display_path, kind=doc.kind, format=format_, tokens=doc.n_tokens, events=doc.n_events,
                   pages=doc.n_pages, lines=None if doc.kind in BLOCK_KINDS else doc.n_lines, nodes=roots)


def _count_events(nodes: dict[str, OutlineNode], places: list[tuple]) -> None:
    """Each node's number of events: those whose paths pass through it."""
    counts: dict[str, set[int]] = {}
    for event_id, *_rest, section in places:
        for path in all_paths(decode_section(section)):
            for depth in range(len(path)):
                counts.setdefault(json.dumps(path[: depth + 1], ensure_ascii=False), set()).add(event_id)
    for key, node in nodes.items():
        node.events = len(counts.get(key, ()))
