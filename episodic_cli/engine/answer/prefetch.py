"""What `epi chat` prepares while the user reads an answer and types the next question (issue 36, item 2).

A follow-up usually asks about the same place: its retrieval lands on the events just read or next to them, and it
reads each hit with its neighbours. So the events to prepare first are those the last answer found but did not read
whole from a block (left out, or read as a sentence, to keep within --cold-seconds), best hit first; then their
neighbours, nearest first, around the best hits first; then the events questions retrieved most often
(store/retrieval_log.py). Only events whose block the answer model's tier lacks are named; preparing them is
`KVModeAnswerer.prepare`, one event at a time so that a new question stops it within one event.
"""
from __future__ import annotations

from collections.abc import Callable

from ...store import Store
from ..retrieval.retrieve import RetrievedEvent

NEIGHBOUR_REACH = 2      # events either side of each one read: a follow-up's hit +-1 neighbour reads that far
MOST_RETRIEVED = 8       # then this many of the store's most retrieved events
MAX_EVENTS = 24          # what one turn's prefetch names at most (~5k tokens: the time a user takes to type, or more)


def likely_next(store: Store, read: list[RetrievedEvent], has_block: Callable[[RetrievedEvent], bool],
                max_events: int = MAX_EVENTS) -> list[int]:
    """Event ids to prepare, in order: the events of `read` (what the last answer retrieved, best hit first), then
    their neighbours, nearest first, then the store's most retrieved events; only those without a block."""
    seen: set[int] = set()
    out: list[int] = []

    def consider(r: RetrievedEvent | None) -> None:
        if r is not None and r.event.id not in seen and len(out) < max_events:
            seen.add(r.event.id)
            if not has_block(r):
                out.append(r.event.id)

    hits = sorted(read, key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0))
    for r in hits:
        consider(r)
    for distance in range(1, NEIGHBOUR_REACH + 1):
        for r in hits:
            for ordinal in (r.event.ordinal + distance, r.event.ordinal - distance):
                consider(_event_at(store, r, ordinal))
    counts = store.retrieval_counts()
    for event_id in sorted(counts, key=lambda i: -counts[i])[:MOST_RETRIEVED]:
        if event_id not in seen:
            consider(retrieved_event(store, event_id))
    return out


def _event_at(store: Store, near: RetrievedEvent, ordinal: int) -> RetrievedEvent | None:
    if ordinal < 0 or ordinal >= near.document.n_events:
        return None
    event = store.event_at(near.document.id, ordinal, damaged=[])
    return None if event is None else RetrievedEvent(event, near.document, None, None)


def retrieved_event(store: Store, event_id: int) -> RetrievedEvent | None:
    """The event as an answer would read it (with its document), or None when it is gone or damaged."""
    events = store.get_events([event_id], damaged=[])
    if not events:
        return None
    return RetrievedEvent(events[0], store.get_document(events[0].document_id), None, None)
