"""Plain records exchanged with the store, and the store's user-facing errors."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Bump when anything on disk (schema semantics, embedding layout, KV block layout) stops being readable by
# older/newer code; stores with another version are refused instead of being silently misread.
# Format 2 split the model-independent archive from the per-model KV tiers (kv_tier/); format 1 stores are upgraded
# on open (upgrade/v1.py).
STORE_FORMAT_VERSION = 2
DEFAULT_KV_BUDGET_BYTES = 10 * 10**9  # 10 GB, decimal as every size epi reads or shows (docs/store-format.md)


class StoreError(Exception):
    """User-facing, one-line message that says what to do."""


class StoreMismatchError(StoreError):
    """Store was written with another embedder or in another format."""

    def __init__(self, message: str, field: str = "", stored: object = None, requested: object = None):
        super().__init__(message)
        self.field = field
        self.stored = stored
        self.requested = requested


class StoreBusyError(StoreError):
    """Another process is writing this store."""


class StoreDamagedError(StoreError):
    """SQLite found the store's database file damaged (a malformed page): the command stops, nothing is changed."""


class EventDamagedError(StoreDamagedError):
    """An event's row no longer matches its checksum (checksum.py): named with its document, to be ingested again."""

    def __init__(self, message: str, event_id: int, document: str):
        super().__init__(message)
        self.event_id = event_id
        self.document = document


@dataclass(frozen=True)
class StoreIdentity:
    """What the archive is bound to: only the embedder (its vectors are the dense index). The language model that cut
    the events (the segmenter) is recorded, not checked: any model can answer from the events' text, and its KV blocks
    live in a tier of its own (kv_tier/)."""

    embedder: str
    embed_dim: int
    # Recorded for `epi doctor` / `epi config` only; neither invalidates stored events.
    segmenter: dict = field(default_factory=dict, compare=False)     # model_name, model_sha256, tokenizer_sha256
    segmentation: dict = field(default_factory=dict, compare=False)


# Fields whose change makes stored embeddings meaningless for the current run.
IDENTITY_CHECKED_FIELDS = ("embedder", "embed_dim")


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
    segmenter: str | None = None  # "name sha256" of the model that cut this document's events (None: format 1)
    status: str = "complete"      # "partial" while ingest commits it group by group (or after an interruption)
    checkpoint: str | None = None  # a partial document's resume state (JSON, engine/ingest/checkpoint.py)

    @property
    def partial(self) -> bool:
        return self.status == "partial"


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
    section: str | None = None  # JSON: where the event sits in its document's structure (engine/documents/structure.py)
