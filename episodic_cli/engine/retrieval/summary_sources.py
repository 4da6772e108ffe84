"""The map's summaries (store/summaries.py) as sources an answer reads: each becomes a RetrievedEvent whose event is
a stand-in holding the summary's text (a negative id, so it never meets an event's id, block or neighbours), and
the overview of an archive is chosen here: the summaries an overview question reads, most general first.
"""
from __future__ import annotations

import numpy as np

from ...store import DocumentRecord, EventRecord, Store
from ...store.summaries import COLLECTION, DOCUMENT, PART, SummaryRecord, current_collections
from .retrieve import RetrievedEvent, fuse


def summary_event(summary: SummaryRecord, document: DocumentRecord | None, n_tokens: int | None = None
                  ) -> RetrievedEvent:
    """A summary as a source: its stand-in event holds "label: text" and spans the characters (-id, -1), so its KV
    block has a key of its own in the answer model's tier (store/summaries.py, summary_block_key) and a second
    question reading it loads it. `n_tokens`: its length in the answer model's tokens (else ~4 characters a token)."""
    text = summary_text(summary)
    n = n_tokens if n_tokens is not None else max(1, len(text) // 4)
    event = EventRecord(ordinal=-1, token_start=0, token_end=n, char_start=-int(summary.id or 0), char_end=-1,
                        page_start=None, page_end=None, line_start=None, line_end=None, surprise_mean=0.0,
                        surprise_max=0.0, text=text, id=-int(summary.id or 0),
                        document_id=None if document is None else document.id)
    if document is None or document.content_sha256 != summary.content_sha256:  # a collection: its folder
        document = DocumentRecord(path=summary.label, display_path=summary.label, kind="collection",
                                  content_sha256=summary.content_sha256, n_tokens=summary.n_tokens, n_events=0,
                                  n_pages=None, n_lines=None, ingest_seconds=0.0, id=document.id if document else None)
    return RetrievedEvent(event, document, None, None, summary=summary)


def summary_text(summary: SummaryRecord) -> str:
    """What the answer model reads of a summary: what it covers, then the summary."""
    return f"Summary of {summary.label}: {summary.text}"


def summary_sources(store: Store, summaries: list[SummaryRecord]) -> list[RetrievedEvent]:
    docs = {d.id: d for d in store.documents()}
    return [summary_event(s, docs.get(s.document_id)) for s in summaries
            if s.document_id is None or s.document_id in docs]


def overview(store: Store, query: np.ndarray | None, question: str, char_budget: int,
             document_ids: set[int] | None = None, every_part: bool = False,
             collection_keys: set[str] | frozenset[str] = frozenset()) -> list[SummaryRecord]:
    """What an overview question reads, most general first and within `char_budget` characters of summary text:
    the collections' and documents' summaries (all when they fit, else the most similar to the question), then the
    parts' summaries most similar to the question while room is left. `document_ids`: only these documents'.
    `every_part` (a question about each part in turn): the documents' and then all their parts' summaries, each
    level in document order, as far as the budget goes (no search: `query` may be None). `collection_keys`: the
    collections' summaries that may be read beside `document_ids` (a folder asked about by its name)."""
    shelf = store.summaries()
    documents = store.documents()
    fresh = {d.id: d.content_sha256 for d in documents}
    path_of = {d.id: d.display_path for d in documents}
    folders = current_collections(documents)

    def usable(s: SummaryRecord) -> bool:
        if s.document_id is None:  # a collection's: only while its folder holds the documents it was written from
            return (document_ids is None or s.key in collection_keys) and s.level == COLLECTION \
                and folders.get(s.key) == s.content_sha256
        return s.document_id in fresh and fresh[s.document_id] == s.content_sha256 and (
            document_ids is None or s.document_id in document_ids)

    chosen: list[SummaryRecord] = []
    seen: set[str] = set()
    used = 0
    ranked = {} if every_part else {i: rank for rank, (i, _) in enumerate(
        fuse([shelf.search_dense(query, 200), shelf.search_lexical(question, 200)]))}
    for level in (COLLECTION, DOCUMENT, PART):
        items = [s for s in shelf.all(level) if usable(s)]
        if every_part:
            items.sort(key=lambda s: (path_of.get(s.document_id, ""), s.first_ordinal or 0, s.id or 0))
        else:
            if level == PART:
                items = [s for s in items if s.id in ranked]
            items.sort(key=lambda s: ranked.get(s.id, len(ranked)))
        for s in items:
            if s.text in seen:  # a one-part document: its summary is its part's
                continue
            seen.add(s.text)
            size = len(s.text) + len(s.label) + 8
            if used + size > char_budget:
                continue
            chosen.append(s)
            used += size
    return chosen
