"""Re-embedding a store that an older embedder identity made (embedder.py, KNOWN_NAMES) with today's windows.

Such a store keeps working as it is; `epi reembed` is for someone who wants its long events' tails searchable too.
Only the vectors change: no document is read again and no KV block is touched. The vectors are computed first and
written in one transaction at the end, so Ctrl-C or a crash leaves the store as it was.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...store import Store
from .embedder import Embedder

BATCH = 64  # texts per embedding call: progress moves often enough, batches stay full


@dataclass
class ReembedProgress:
    done: int = 0          # events and summaries embedded so far
    total: int = 0
    seconds: float = 0.0
    written: bool = False  # the new vectors are in the store


def reembed(store: Store, embedder: Embedder, progress: Callable[[ReembedProgress], None] | None = None
            ) -> ReembedProgress:
    """Every event and summary of `store` embedded again by `embedder`, whose name becomes the store's embedder.
    Holds the writer lock throughout, so that nothing is added meanwhile. A store already embedded this way is left
    alone (`written` False)."""
    state = ReembedProgress()
    if store.identity.embedder == embedder.name:
        return state
    started = time.perf_counter()
    with store.writer():
        documents = store.documents()
        summaries = store.summaries().all()
        state.total = sum(d.n_events for d in documents) + len(summaries)
        events: dict[int, np.ndarray] = {}
        for document in documents:
            found = store.events_of(document.id)  # a damaged event stops here, named, with what repairs it
            for start in range(0, len(found), BATCH):
                chunk = found[start : start + BATCH]
                events.update(zip((e.id for e in chunk), embedder.embed_texts([e.text for e in chunk])))
                state.done += len(chunk)
                state.seconds = time.perf_counter() - started
                if progress:
                    progress(state)
        vectors = embedder.embed_texts([s.embedding_text for s in summaries]) if summaries else []
        summary_vectors = dict(zip((s.id for s in summaries), vectors))
        state.done += len(summaries)
        store.replace_embeddings(embedder.name, events, summary_vectors)
    state.written = True
    state.seconds = time.perf_counter() - started
    if progress:
        progress(state)
    return state
