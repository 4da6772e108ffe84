"""Plain records exchanged with the store, and the store's user-facing errors."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Bump when anything on disk (schema semantics, embedding layout, KV block layout) stops being readable by
# older/newer code; stores with another version are refused instead of being silently misread.
STORE_FORMAT_VERSION = 1


class StoreError(Exception):
    """User-facing, one-line message that says what to do."""


class StoreMismatchError(StoreError):
    """Store was written by another model / embedder / llama-cpp-python version / format."""

    def __init__(self, message: str, field: str = "", stored: object = None, requested: object = None):
        super().__init__(message)
        self.field = field
        self.stored = stored
        self.requested = requested


class StoreBusyError(StoreError):
    """Another process is writing this store."""


@dataclass(frozen=True)
class StoreIdentity:
    model_name: str
    model_sha256: str
    tokenizer_sha256: str
    llama_cpp_version: str
    embedder: str
    embed_dim: int
    # Recorded for `epi doctor` only: changing segmentation does not invalidate stored events.
    segmentation: dict = field(default_factory=dict, compare=False)


# Fields whose change makes stored tokens/KV/embeddings meaningless for the current run (checked in this order,
# so the most understandable difference is reported first).
IDENTITY_CHECKED_FIELDS = (
    "model_name",
    "model_sha256",
    "tokenizer_sha256",
    "llama_cpp_version",
    "embedder",
    "embed_dim",
)


@dataclass
class DocumentRecord:
    path: str
    display_path: str
    kind: str
    content_sha256: str
    n_tokens: int
    n_events: int
    n_pages: int | None
    n_lines: int | None
    ingest_seconds: float
    ingested_at: float = 0.0
    id: int | None = None


@dataclass
class EventRecord:
    ordinal: int
    token_start: int
    token_end: int
    char_start: int
    char_end: int
    page_start: int | None
    page_end: int | None
    line_start: int | None
    line_end: int | None
    surprise_mean: float
    surprise_max: float
    text: str
    embedding: np.ndarray | None = None
    id: int | None = None
    document_id: int | None = None
    kv_offset: int | None = None     # the event's KV block in kv/blocks.ekv (kv mode); None when not captured
    kv_length: int | None = None
    # float16 [n_layer, n_keys, n_embd_k]: the event's representative attention keys (EM-LLM 3.4), unrotated;
    # stored with its KV block, None without one.
    rep_keys: np.ndarray | None = None
