"""On-disk episodic store: SQLite (metadata, event text, embeddings, FTS5) + a derived hnswlib index.

A lower layer: it must never import llama_cpp, torch or sentence_transformers.
"""

from .episodic_store import Store
from .records import (
    STORE_FORMAT_VERSION,
    DocumentRecord,
    EventDamagedError,
    EventRecord,
    StoreBusyError,
    StoreDamagedError,
    StoreError,
    StoreIdentity,
    StoreMismatchError,
)

__all__ = [
    "STORE_FORMAT_VERSION",
    "DocumentRecord",
    "EventDamagedError",
    "EventRecord",
    "Store",
    "StoreBusyError",
    "StoreDamagedError",
    "StoreError",
    "StoreIdentity",
    "StoreMismatchError",
]
