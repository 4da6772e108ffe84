"""The map (`epi map`, and `epi ingest` after the blocks): the answer model summarises each part of each document
from that part's KV blocks, then each document from its parts' summaries, then each collection (the documents
under one folder) from its documents' summaries. RAPTOR's tree, with the documents' own structure as the tree:
chapters, sections and files are better clusters than embeddings for books, manuals and code.

- A part is a top-level chapter or section (the second level when one heading spans the whole document, as a
  README's title does), the text before the first heading, or a code file whole. A document with no structure is
  cut into parts of about PART_TOKENS.
- A part longer than what the answer context holds is read in chunks, each summarised (stored too: they stand in
  for what a whole-scope answer cannot read), and the part is summarised from them.
- A part with two sections or more one heading down (a chapter's sections) also gets a summary of each section of
  at least SUMMARY_TOKENS tokens, from that section's blocks, in a sentence or two: what "what does each section of
  chapter 3 cover?" reads. A shorter section is read as it is: its summary would be as long.
- Resumable: a summary whose key exists, whose content hash matches the document and whose label is the one the
  part has now is not written again, so a killed `epi map` goes on where it stopped and nothing is summarised
  twice. A summary made from others (a document's, a collection's, a part's from its chunks) is written again when
  one of those is newer than it (summary ids only grow): it was made from their old text.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ...store import DocumentRecord, EventRecord, Store
from ...store.summaries import (COLLECTION, DOCUMENT, PART, SECTION, SummaryRecord, collection_key,
                                collection_sha, collections, document_key, part_key)
from ..budgets import MAP_PART_TOKENS, SUMMARY_TOKENS
from ..documents.structure import CODE_KINDS, decode as decode_section, describe_node
from ..prompt import (collection_summary_request, document_summary_request, part_summary_request,
                      section_summary_request)
from ..retrieval.retrieve import RetrievedEvent
from .kv_mode import KVModeAnswerer
from .records import Answer
from ..retrieval.summary_sources import summary_event

CODE_DOCUMENT_KINDS = frozenset({"code"})


@dataclass
class MapPart:
    document: DocumentRecord
    path: list | None        # the section path the part is (None: the whole document, or text before any heading)
    label: str               # 'ch. 3 "The Betrayal"', 'lines 1-40'
    events: list[EventRecord]
    chunk: int | None = None  # the chunk's number within its part, when the part is read in chunks
    level: str = PART         # SECTION: a section inside a part, summarised beside it
    within: str = ""          # a section's part, as labelled

    @property
    def n_tokens(self) -> int:
        return sum(e.token_end - e.token_start for e in self.events)

    @property
    def key(self) -> str:
        path = list(self.path or [])
        if self.chunk is not None:
            path = [*path, ["chunk", str(self.chunk), ""]]
        elif self.path is None and self.events:
            path = [["span", str(self.events[0].ordinal), str(self.events[-1].ordinal)]]
        return part_key(self.document.id, path)


@dataclass
class MapProgress:
    """How far a map run is: tokens of parts summarised against tokens to summarise, and summaries written."""

    tokens_done: int = 0
    tokens_total: int = 0
    written: int = 0
    skipped: int = 0   # present already (a resumed run)
    missed: int = 0    # parts that got no summary: the model wrote nothing, or their document changed meanwhile
    stage: str = "parts"  # what is being written: "parts", "document summaries", "folder summaries"
    seconds: float = 0.0
    stopped: str | None = None
    per_level: dict = field(default_factory=lambda: {SECTION: 0, PART: 0, DOCUMENT: 0, COLLECTION: 0})

    def as_json(self) -> dict:
        return {**self.__dict__, "seconds": round(self.seconds, 1)}


def _top_node(ev: EventRecord, depth: int) -> list | None:
    section = decode_section(ev.section)
    path = (section or {}).get("path") or []
    prose = [n for n in path if n[0] not in CODE_KINDS]
    return prose[:depth] or None


def _holds_others(events: list[EventRecord], node: list, depth: int) -> bool:
    """Whether the events also hold a real part of another section at `depth` than `node` (their `also`)."""
    for e in events:
        for chain in (decode_section(e.section) or {}).get("also") or []:
            prose = [n for n in chain if n[0] not in CODE_KINDS][:depth]
            if len(prose) == depth and prose != node:
                return True
    return False


def _span_label(events: list[EventRecord], kind: str) -> str:
    first, last = events[0], events[-1]
    if first.page_start is not None:
        a, b = first.page_start, last.page_end or last.page_start
        return f"p. {a}" if a == b else f"pp. {a}-{b}"
    if first.line_start is not None:
        a, b = first.line_start, last.line_end or last.line_start
        word = "¶" if kind in ("epub", "html", "docx") else "lines"
        return f"{word} {a}-{b}"
    return f"events {first.ordinal}-{last.ordinal}"


def plan_parts(document: DocumentRecord, events: list[EventRecord], room: int) -> list[MapPart]:
    """The parts of one document to summarise, in order; a part over `room` tokens is returned as its chunks."""
    if not events:
        return []
    depth = 1
    if document.kind in CODE_DOCUMENT_KINDS:
        groups = [(None, events)]
    else:
        tops = {str(_top_node(e, 1)) for e in events if _top_node(e, 1)}
        if len(tops) == 1 and any(_top_node(e, 2) and len(_top_node(e, 2)) == 2 for e in events):
            depth = 2  # one title over everything (a README's "# name"): its sections are the parts
        groups: list[tuple[list | None, list[EventRecord]]] = []
        for e in events:
            node = _top_node(e, depth)
            if groups and groups[-1][0] == node:
                groups[-1][1].append(e)
            else:
                groups.append((node, [e]))
        if all(node is None for node, _ in groups):  # no structure: parts of about MAP_PART_TOKENS
            groups = []
            for e in events:
                if not groups or sum(x.token_end - x.token_start for x in groups[-1][1]) >= MAP_PART_TOKENS:
                    groups.append((None, []))
                groups[-1][1].append(e)
    if len(groups) == 1 and groups[0][0] is not None and _holds_others(groups[0][1], groups[0][0], depth):
        # A short document whose one event holds two sections ("Arrival", "The Storm") is one part, named after the
        # section most of it is in: the request then asked for "The Storm" alone. It is read as the whole it is.
        groups = [(None, groups[0][1])]
    parts = []
    for path, evs in groups:
        # Under one title over everything, the title is the document's, not the part's: a manual's parts were
        # labelled '"Version", §6 "Legal Matters"' and summarised as "the Version section".
        shown = (path[depth - 1:] or path) if path else None
        label = ", ".join(describe_node(n) for n in shown) if shown else _span_label(evs, document.kind)
        part = MapPart(document, path, label, evs)
        sections = _sections(part, room)
        if part.n_tokens <= room:
            parts.append(part)
            parts.extend(sections)
            continue
        chunk: list[EventRecord] = []
        n = 0
        for e in evs:
            size = e.token_end - e.token_start
            if chunk and n + size > room:
                parts.append(MapPart(document, path, f"{label} ({_span_label(chunk, document.kind)})", chunk,
                                     chunk=len([p for p in parts if p.path == path and p.chunk is not None]) + 1))
                chunk, n = [], 0
            chunk.append(e)
            n += size
        if chunk:
            parts.append(MapPart(document, path, f"{label} ({_span_label(chunk, document.kind)})", chunk,
                                 chunk=len([p for p in parts if p.path == path and p.chunk is not None]) + 1))
        parts.extend(sections)
    return parts


def chunks_by_part(parts: list[MapPart]) -> dict[str, list[MapPart]]:
    """The chunks of each part read in chunks, by the part's section path."""
    chunked: dict[str, list[MapPart]] = {}
    for p in parts:
        if p.chunk is not None:
            chunked.setdefault(str(p.path), []).append(p)
    return chunked


def whole_part(chunks: list[MapPart]) -> MapPart:
    """A part read in chunks, as one: its summary is made from its chunks' summaries."""
    return MapPart(chunks[0].document, chunks[0].path, chunks[0].label.rsplit(" (", 1)[0],
                   [e for c in chunks for e in c.events])


def document_sources(parts: list[MapPart]) -> list[str]:
    """The keys of the summaries a document's summary is made from, in order: each part's, a part read in chunks as
    one. (A code file read in chunks is keyed by its events' span, not by its empty path: with the empty path's key
    the file's summary was never found, and a file over the room got no document summary.)"""
    chunked = chunks_by_part(parts)
    return list(dict.fromkeys(p.key if p.chunk is None else whole_part(chunked[str(p.path)]).key for p in parts))


def _sections(part: MapPart, room: int) -> list[MapPart]:
    """The sections one heading below `part` worth a summary of their own (module docstring), in order; none when
    the part has fewer than two."""
    if not part.path:
        return []
    depth = len(part.path) + 1
    groups: dict[str, tuple[list, list[EventRecord]]] = {}
    for e in part.events:
        node = _top_node(e, depth)
        if node is None or len(node) < depth:
            continue  # the part's own opening, before its first section
        groups.setdefault(str(node), (node, []))[1].append(e)
    if len(groups) < 2:
        return []
    doc = part.document
    sections = [MapPart(doc, node, f"{part.label}, {describe_node(node[-1])}", evs, level=SECTION, within=part.label)
                for node, evs in groups.values()]
    return [s for s in sections if SUMMARY_TOKENS <= s.n_tokens <= room]


def short_name(doc: DocumentRecord) -> str:
    """A document as a summary request names it: a code file with its folder (src/util.py), anything else by its
    file name alone, since the model takes a folder's name for the book's title (a novel under heldout-docs/ was
    summarised as a book called "Held Out")."""
    parts = doc.display_path.replace(os.sep, "/").rstrip("/").split("/")
    return "/".join(parts[-2:] if doc.kind in CODE_DOCUMENT_KINDS else parts[-1:])


class MapWriter:
    """Writes the map of a store with one answer model. `embed(text)` gives a summary's vector."""

    def __init__(self, store: Store, answerer: KVModeAnswerer, model_name: str, embed: Callable,
                 room: int, should_stop: Callable[[], bool] | None = None):
        self.store = store
        self.shelf = store.summaries()
        self.answerer = answerer
        self.model_name = model_name
        self.embed = embed
        self.room = room
        self.should_stop = should_stop or (lambda: False)

    def plan(self, documents: list[DocumentRecord]) -> list[MapPart]:
        return [p for d in documents if d.status == "complete" for p in plan_parts(d, self.store.events_of(d.id),
                                                                                  self.room)]

    def _fresh(self, key: str, sha: str, label: str | None = None,
               made_from: list[SummaryRecord] = ()) -> bool:
        """Whether the summary under `key` is this model's, of this content, under this label, and newer than the
        summaries it was made from. A label that changed (epi names parts better than it did) means the request
        named the part wrongly: it is written again."""
        old = self.shelf.get(key)
        return (old is not None and old.content_sha256 == sha and old.model == self.model_name
                and (label is None or old.label == label) and all(s.id < old.id for s in made_from))

    def run(self, documents: list[DocumentRecord] | None = None,
            progress: Callable[[MapProgress], None] | None = None) -> MapProgress:
        documents = [d for d in (documents or self.store.documents()) if d.status == "complete"]
        parts = self.plan(documents)
        state = MapProgress(tokens_total=sum(p.n_tokens for p in parts))
        started = time.perf_counter()
        report = (lambda: progress(state)) if progress else (lambda: None)
        report()
        by_doc: dict[int, list[MapPart]] = {}
        for p in parts:
            by_doc.setdefault(p.document.id, []).append(p)
        try:
            for doc in documents:
                doc_parts = by_doc.get(doc.id, [])
                for p in doc_parts:
                    if self._fresh(p.key, doc.content_sha256, p.label):
                        state.skipped += 1
                    elif self._write_part(p):
                        state.written += 1
                        state.per_level[p.level] += 1
                    else:
                        state.missed += 1
                    state.tokens_done += p.n_tokens
                    report()
                    if self.should_stop():
                        state.stopped = "interrupted"
                        return state
                state.stage = "document summaries"  # the bar's tokens are done for this document; the model is not
                report()
                self._write_chunked_parts(doc, doc_parts, state)
                if self._write_document(doc, doc_parts):
                    state.written += 1
                    state.per_level[DOCUMENT] += 1
                self._drop_unplanned(doc, doc_parts)
                state.stage = "parts"
                report()
            state.stage = "folder summaries"
            now = collections(self.store.documents())
            for folder, members in now.items():
                if self.should_stop():
                    state.stopped = "interrupted"
                    return state
                if self._write_collection(folder, members):
                    state.written += 1
                    state.per_level[COLLECTION] += 1
                report()
            # a folder that no longer makes a collection (its documents removed, moved or down to one) keeps none
            keys = {collection_key(folder) for folder in now}
            self.shelf.delete_keys([s.key for s in self.shelf.all(COLLECTION) if s.key not in keys])
        finally:
            state.seconds = time.perf_counter() - started
        return state

    def _drop_unplanned(self, doc: DocumentRecord, parts: list[MapPart]) -> None:
        """A document's summaries under keys its plan no longer makes: parts cut another way (an earlier map with a
        smaller context read a chapter in chunks; epi now names its parts otherwise), which overview questions
        would otherwise read beside the new ones."""
        planned = {p.key for p in parts} | {whole_part(c).key for c in chunks_by_part(parts).values()}
        planned.add(document_key(doc.id))
        self.shelf.delete_keys([s.key for s in self.shelf.of_document(doc.id) if s.key not in planned])

    # -- writing --------------------------------------------------------------------------------------------------

    def _generate(self, request: str, retrieved: list[RetrievedEvent]) -> str:
        answer = Answer()
        for _ in self.answerer.stream(request, retrieved, None, time.perf_counter(), answer,
                                      max_tokens=SUMMARY_TOKENS, should_stop=self.should_stop):
            pass
        return " ".join(answer.text.split())

    def _record(self, level: str, key: str, label: str, text: str, sha: str, doc: DocumentRecord | None,
                events: list[EventRecord] | None, n_tokens: int) -> bool:
        """Store a summary; False when its document was removed or changed meanwhile (nothing is stored)."""
        first, last = (events[0], events[-1]) if events else (None, None)
        record = SummaryRecord(
            level=level, key=key, label=label, text=text, model=self.model_name, content_sha256=sha,
            n_tokens=n_tokens, document_id=None if doc is None else doc.id,
            first_ordinal=None if first is None else first.ordinal, last_ordinal=None if last is None else last.ordinal,
            page_start=None if first is None else first.page_start, page_end=None if last is None else last.page_end,
            line_start=None if first is None else first.line_start, line_end=None if last is None else last.line_end)
        record.embedding = self.embed(record.embedding_text)
        return self.shelf.put(record, place=f"{doc.display_path if doc else ''}") is not None

    def _write_part(self, part: MapPart) -> bool:
        """A part (or a chunk of one) from its events' KV blocks, in document order."""
        retrieved = [RetrievedEvent(e, part.document, None, None) for e in part.events]
        if part.level == SECTION:
            request = section_summary_request(describe_node(part.path[-1]), part.within, short_name(part.document))
        else:
            request = part_summary_request(part.label, short_name(part.document),
                                           part.document.kind in CODE_DOCUMENT_KINDS)
        text = self._generate(request, retrieved)
        return bool(text) and self._record(part.level, part.key, part.label, text, part.document.content_sha256,
                                           part.document, part.events, part.n_tokens)

    def _write_chunked_parts(self, doc: DocumentRecord, parts: list[MapPart], state: MapProgress) -> None:
        """A part read in chunks gets a summary of its own, from its chunks' summaries."""
        for chunks in chunks_by_part(parts).values():
            whole = whole_part(chunks)
            summaries = [s for s in (self.shelf.get(c.key) for c in chunks) if s is not None]
            if not summaries or self._fresh(whole.key, doc.content_sha256, whole.label, summaries):
                continue
            text = self._from_summaries(part_summary_request(whole.label, short_name(doc),
                                                             doc.kind in CODE_DOCUMENT_KINDS), doc, summaries)
            if text and self._record(PART, whole.key, whole.label, text, doc.content_sha256, doc, whole.events,
                                     whole.n_tokens):
                state.written += 1
                state.per_level[PART] += 1

    def _from_summaries(self, request: str, doc: DocumentRecord | None, summaries: list[SummaryRecord]) -> str:
        return self._generate(request, [summary_event(s, doc) for s in summaries])

    def _write_document(self, doc: DocumentRecord, parts: list[MapPart]) -> bool:
        key = document_key(doc.id)
        parts = [p for p in parts if p.level == PART]  # a section's summary is in its part's already
        keys = document_sources(parts)
        summaries = [s for s in (self.shelf.get(k) for k in keys) if s is not None]
        if not summaries or self._fresh(key, doc.content_sha256, made_from=summaries):
            return False
        if len(keys) == 1 and not any(p.chunk is not None for p in parts):
            text = summaries[0].text  # one part: the document's summary is that part's
        else:
            summaries = self._fit(summaries)
            text = self._from_summaries(document_summary_request(short_name(doc),
                                                                 doc.kind in CODE_DOCUMENT_KINDS),
                                        doc, summaries)
        if not text:
            return False
        events = [e for p in parts for e in p.events]  # the plan holds every event of the document, in order
        return self._record(DOCUMENT, key, os.path.basename(doc.display_path) or doc.display_path, text,
                            doc.content_sha256, doc, events, doc.n_tokens)

    def _fit(self, summaries: list[SummaryRecord]) -> list[SummaryRecord]:
        """As many summaries as the answer context holds (about 4 characters a token), evenly spread if not all."""
        budget = self.room * 4
        if sum(len(s.text) + len(s.label) + 4 for s in summaries) <= budget:
            return summaries
        n = max(1, budget // max(1, max(len(s.text) + len(s.label) + 4 for s in summaries)))
        step = len(summaries) / n
        return [summaries[int(i * step)] for i in range(n)]

    def _write_collection(self, folder: str, members: list[DocumentRecord]) -> bool:
        key = collection_key(folder)
        sha = collection_sha([d.content_sha256 for d in members])
        summaries = [s for s in (self.shelf.get(document_key(d.id)) for d in members) if s is not None]
        if not summaries or self._fresh(key, sha, made_from=summaries):
            return False
        text = self._from_summaries(collection_summary_request(folder), None, self._fit(summaries))
        if not text:
            return False
        return self._record(COLLECTION, key, folder, text, sha, None, None, sum(d.n_tokens for d in members))
