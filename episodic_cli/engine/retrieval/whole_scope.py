"""Reading a named part whole (a chapter, a section, a page range, a file, a class or function): its events in
document order, as far as the answer context holds. When it does not fit, the events that match the question best
are read (still in document order) and the map's summaries of the parts left out stand in for them.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ...store import DocumentRecord, Store
from ...store.summaries import PART, SECTION, SummaryRecord, summary_path
from .retrieve import RetrievedEvent, fuse
from .summary_sources import summary_event, summary_text

STAND_IN_SHARE = 4  # summaries standing in for unread parts take at most 1/4 of the room


@dataclass
class ScopeReading:
    events: list[RetrievedEvent]                 # what the answer reads, in document order (stand-ins included)
    scope_tokens: int                            # tokens of the whole scope
    read_tokens: int                             # of those, read from the events themselves
    stand_ins: list[SummaryRecord] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.read_tokens >= self.scope_tokens

    def described(self, what: str) -> str:
        """"read all of ch. 12, 7,930 tokens" or "read 9,100 of 14,200 tokens of ch. 12, and 3 summaries"."""
        if self.complete:
            return f"read all of {what}, {self.scope_tokens:,} tokens"
        extra = f", and {len(self.stand_ins)} summar{'y' if len(self.stand_ins) == 1 else 'ies'} of the rest" \
            if self.stand_ins else ""
        return f"read {self.read_tokens:,} of {self.scope_tokens:,} tokens of {what}{extra}"


def read_scope(store: Store, ids: set[int], query: np.ndarray, text: str, room: int,
               tokens_of=None) -> ScopeReading:
    """The events `ids` whole if they fit `room` tokens, else the best-matching of them and stand-in summaries.
    `tokens_of(text)`: a summary's length in the answer model's tokens."""
    events = store.get_events(sorted(ids), [])
    docs = {}
    for e in events:
        if e.document_id not in docs:
            docs[e.document_id] = store.get_document(e.document_id)
    items = sorted((RetrievedEvent(e, docs[e.document_id], None, None) for e in events),
                   key=lambda r: (r.document.display_path, r.event.ordinal))
    total = sum(r.n_tokens for r in items)
    if total <= room:
        return ScopeReading(items, total, total)
    ranking = fuse([store.search_dense(query, len(ids), within=ids), store.search_lexical(text, len(ids), within=ids)])
    rank = {i: n for n, (i, _) in enumerate(ranking)}
    by_rank = sorted(items, key=lambda r: rank.get(r.event.id, len(rank)))
    own_room = room - room // STAND_IN_SHARE
    chosen, used = set(), 0
    for r in by_rank:
        if used + r.n_tokens <= own_room:
            chosen.add(r.event.id)
            used += r.n_tokens
    if not chosen and by_rank:  # one event longer than the room: the best is read anyway (the context still holds it)
        chosen.add(by_rank[0].event.id)
        used = by_rank[0].n_tokens
    left = [r for r in items if r.event.id not in chosen]
    stand_ins = _stand_ins(store, items, left, room - used, tokens_of)
    read = [r for r in items if r.event.id in chosen]
    for s, n in stand_ins:
        read.append(summary_event(s, docs.get(s.document_id), n))
    read.sort(key=lambda r: (r.document.display_path,
                             r.event.ordinal if r.summary is None else r.summary.first_ordinal, r.summary is None))
    for r in read:  # ranked events count as hits, so evidence and citations treat them as read for the question
        if r.summary is None and r.event.id in rank:
            r.score, r.rank = -rank[r.event.id], rank[r.event.id]
    return ScopeReading(read, total, used, [s for s, _ in stand_ins])


def _summaries_within(store: Store, doc: DocumentRecord, ordinals: set[int], levels: tuple[str, ...]
                      ) -> list[tuple[SummaryRecord, set[int]]]:
    """The document's current summaries of these levels that cover only events of `ordinals`, each with the
    ordinals it covers."""
    out = []
    for s in store.summaries().of_document(doc.id):
        if s.level not in levels or s.first_ordinal is None or s.content_sha256 != doc.content_sha256:
            continue
        covered = set(range(s.first_ordinal, s.last_ordinal + 1))
        if covered <= ordinals:
            out.append((s, covered))
    return out


def read_sections(store: Store, ids: set[int], room: int, tokens_of=None) -> ScopeReading | None:
    """A question about each section of a named part: the map's summaries of its sections, in document order, with
    the part's own summary first and what no section summary covers (the part's opening, a short section) read as
    it is. None when the map has fewer than two section summaries inside the events `ids`, or they do not fit `room`
    tokens (the part is then read as any named part is)."""
    events = store.get_events(sorted(ids), [])
    docs = {d: store.get_document(d) for d in {e.document_id for e in events}}
    in_scope: dict[int, set[int]] = {}
    for e in events:
        in_scope.setdefault(e.document_id, set()).add(e.ordinal)
    sections, parts = [], []
    for doc_id, ordinals in in_scope.items():
        for s, _ in _summaries_within(store, docs[doc_id], ordinals, (SECTION, PART)):
            (sections if s.level == SECTION else parts).append(s)
    # The named part is the one most of these sections sit in: the scope may hold an event more, one that starts in
    # the part before, and a section of that part made of that event alone (ESS's chapter 7 listed chapter 6's
    # "Manipulating saved transcript files" first). The part's own summary is that part's, not a chunk of it.
    parent_of = {s.id: json.dumps(summary_path(s)[:-1]) for s in sections}
    parent = Counter(parent_of.values()).most_common(1)[0][0] if sections else None
    sections = [s for s in sections if parent_of[s.id] == parent]
    if len(sections) < 2:
        return None
    parts = [p for p in parts if json.dumps(summary_path(p)) == parent]
    size = tokens_of or (lambda t: len(t) // 4)
    read: list[RetrievedEvent] = [summary_event(s, docs[s.document_id], size(summary_text(s))) for s in parts]
    by_start = {(s.document_id, s.first_ordinal): s for s in sections}
    skip: set[tuple[int, int]] = set()
    for e in sorted(events, key=lambda e: (docs[e.document_id].display_path, e.ordinal)):
        s = by_start.get((e.document_id, e.ordinal))
        if s is not None:
            read.append(summary_event(s, docs[e.document_id], size(summary_text(s))))
            skip |= {(e.document_id, o) for o in range(s.first_ordinal, s.last_ordinal + 1)}
        elif (e.document_id, e.ordinal) not in skip:
            read.append(RetrievedEvent(e, docs[e.document_id], None, None))
    used = sum(r.n_tokens for r in read)
    if used > room:
        return None
    total = sum(e.token_end - e.token_start for e in events)
    own = sum(r.n_tokens for r in read if r.summary is None)
    return ScopeReading(read, total, own, sections)


def _stand_ins(store: Store, items: list[RetrievedEvent], left: list[RetrievedEvent], room: int, tokens_of
               ) -> list[tuple[SummaryRecord, int]]:
    """Part, chunk and section summaries inside the scope that cover unread events, those covering most unread
    events first, within `room` tokens."""
    if not left:
        return []
    unread: dict[int, set[int]] = {}
    for r in left:
        unread.setdefault(r.document.id, set()).add(r.event.ordinal)
    docs = {r.document.id: r.document for r in left}
    candidates = []
    for doc_id, ordinals in unread.items():
        in_scope = {r.event.ordinal for r in items if r.document.id == doc_id}
        for s, covered in _summaries_within(store, docs[doc_id], in_scope, (PART, SECTION)):
            if covered & ordinals:
                candidates.append((len(covered & ordinals), -len(covered), s))
    chosen: list[tuple[SummaryRecord, int]] = []
    done: set[tuple[int, int]] = set()
    for _, _, s in sorted(candidates, key=lambda c: (-c[0], c[1])):
        span = set((s.document_id, o) for o in range(s.first_ordinal, s.last_ordinal + 1))
        if span <= done:
            continue
        text = summary_text(s)  # what the answer reads of it
        n = tokens_of(text) if tokens_of else len(text) // 4
        if n <= room:
            chosen.append((s, n))
            room -= n
            done |= span
    return chosen


def enclosing(store: Store, hits: list[RetrievedEvent], units: int = 2) -> set[int]:
    """The events of the innermost definitions or sections the best `units` hits sit in (an explanation reads the
    function or section its answer is in whole, not only the passage that matched), with the hits themselves."""
    from ..documents.structure import all_paths, decode

    ids = {r.event.id for r in hits}
    best = sorted((r for r in hits if r.score is not None), key=lambda r: r.rank if r.rank is not None else 1 << 30)
    for r in best[:units]:
        path = (decode(r.event.section) or {}).get("path") or []
        if not path:
            continue
        for row in store.event_places([r.document.id]):
            if any(p[:len(path)] == path for p in all_paths(decode(row[7]))):
                ids.add(row[0])
    return ids
