"""Ingest: parse -> tokenize -> one llama.cpp pass (surprise) -> events -> embed -> commit, per document.

Nothing is held across documents, and each document is committed on its own (a long one in groups of events, with
a checkpoint to resume from: document_pass.py), so one failure or a Ctrl-C never loses the work before it.
"""
from __future__ import annotations

import errno
import shutil
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ...store import DocumentRecord, Store, StoreError
from ..documents.sources import NothingToRead, Skipped, SourceDocument, file_sha256, load_document
from ..embed.embedder import Embedder
from ..errors import EpiError
from ..kv.keeper import BlockKeeper
from ..kv.keys import rope_params
from ..llama.backend import INGEST_BATCH, LlamaModel, LlamaSession
from ..prompt import sink_tokens
from .checkpoint import remove_stale_snapshots
from .document_pass import DEFAULT_COMMIT_EVERY, DocumentPass
from .segment import SegmentParams
from .token_stream import DocumentTokens


@dataclass
class IngestResult:
    path: str
    display_path: str
    status: str               # "ingested" | "unchanged" | "failed" | "skipped" | "deferred" (cluster.py)
    tokens: int = 0
    events: int = 0
    seconds: float = 0.0
    error: str | None = None
    note: str | None = None  # how it was read, when the user should know ("pages 3-9 read by OCR")
    # this run's seconds by stage: "extract" (the file to text, and its tokens counted), "read" (the model's pass,
    # blocks kept included), "embed", "commit" (the store's writes and checkpoints); empty where nothing was read
    stage_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def as_json(self) -> dict:
        return {"path": self.display_path, "tokens": self.tokens, "events": self.events,
                "seconds": round(self.seconds, 3), "tokens_per_s": round(self.tokens_per_s, 1),
                "status": self.status, **({"error": self.error} if self.error else {}),
                **({"note": self.note} if self.note else {}),
                **({"stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()}}
                   if self.stage_seconds else {})}


MB = 10**6  # decimal, as every size epi shows
# Bytes per stored KV value by block type: ggml's q8_0 packs 32 values in 34 bytes, q4_0 in 18.
KV_VALUE_BYTES = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
EMBEDDING_ROW_BYTES = 4096  # a 384-float embedding, its index entry and the event row's other columns
SQLITE_FULL = 13  # sqlite3.SQLITE_FULL from Python 3.11 on


class DiskFullError(EpiError):
    """The disk holding the store is full: the run stops (every later file would fail the same way)."""


def is_disk_full(exc: BaseException) -> bool:
    """ENOSPC/EDQUOT from a write, or SQLite's SQLITE_FULL, seen directly or as the cause of a StoreError."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(exc, sqlite3.Error) and (getattr(exc, "sqlite_errorcode", None) == SQLITE_FULL
                                               or "database or disk is full" in str(exc)):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class IngestProgress(Protocol):
    """What the pipeline reports while it works (the CLI draws bars from it; tests may pass a recorder)."""

    def document_reading(self, display_path: str, page: int, pages: int) -> None: ...
    def document_counting(self, display_path: str, chars_done: int, chars_total: int) -> None: ...
    def document_started(self, display_path: str, n_tokens: int, resumed_at: int = 0) -> None: ...
    def tokens_done(self, n: int) -> None: ...
    def document_finished(self, result: IngestResult) -> None: ...


class _Silent:
    def document_reading(self, display_path: str, page: int, pages: int) -> None: ...
    def document_counting(self, display_path: str, chars_done: int, chars_total: int) -> None: ...
    def document_started(self, display_path: str, n_tokens: int, resumed_at: int = 0) -> None: ...
    def tokens_done(self, n: int) -> None: ...
    def document_finished(self, result: IngestResult) -> None: ...


def ingest_context(params: SegmentParams, n_sink: int) -> int:
    """Cells of the ingest pass's context: the sink, the local span (or an undecided event, which reaches back at
    most max_tokens), and one batch, rounded up to llama.cpp's 256-cell padding. Sized to what the pass keeps, not
    larger: llama.cpp attends over every cell up to the highest one in use, live or not, so in a bigger context the
    sliding window's scattered cells would cost attention over the whole context."""
    cells = n_sink + max(params.local, params.max_tokens + 16) + INGEST_BATCH
    return -(-cells // 256) * 256


def _kept(document_pass: DocumentPass | None) -> str:
    """What a failed document keeps: the groups of events committed before the failure, resumable."""
    if document_pass is None or not document_pass.committed:
        return ""
    return (f" ({document_pass.committed} events committed before it are kept, marked partial; run the same command "
            "again to resume)")


class Ingestor:
    def __init__(self, store: Store, model: LlamaModel, embedder: Embedder, params: SegmentParams,
                 n_threads: int | None = None, keeper: BlockKeeper | None = None, segmenter: str | None = None,
                 commit_every: int = DEFAULT_COMMIT_EVERY):
        self.store = store
        self.commit_every = commit_every  # events per committed group of a long document (its checkpoints)
        # A cluster worker holds a document's events and blocks until it returns them: a document that would take
        # more bytes than this is left to the driver ("deferred", cluster.py). None: no limit (a local ingest).
        self.result_limit: int | None = None
        self.model = model
        self.embedder = embedder
        self.params = params
        self.keeper = keeper  # the segmenter's own KV tier, filled for free by the pass; None: no blocks kept
        self.segmenter = segmenter  # recorded with each document: its token spans are in this model's tokens
        self.rope = rope_params(model)
        self.sink = sink_tokens(model)
        # n_seq_max 2: sequence 1 stages each event's cells while its KV block is read out.
        self.session = LlamaSession(model, n_ctx=ingest_context(params, len(self.sink)), n_threads=n_threads,
                                    n_seq_max=2)

    def ingest(self, found_files: Iterable[tuple[Path, str] | Skipped], progress: IngestProgress | None = None
               ) -> Iterator[IngestResult]:
        """Ingest what `sources.discover` found, one document at a time. The caller holds the store's writer lock."""
        progress = progress or _Silent()
        for found in found_files:
            if isinstance(found, Skipped):
                status = "failed" if found.fails_run else "skipped"
                result = IngestResult(str(found.path), str(found.path), status, error=found.reason)
            else:
                result = self.unchanged(*found) or self.ingest_one(*found, progress)
            progress.document_finished(result)
            yield result

    def unchanged(self, path: Path, display_path: str) -> IngestResult | None:
        """The result of a file the store holds complete with this very content (skipped), else None. A file that
        cannot be read (or looked up) is not unchanged: ingest_one reports why."""
        key = str(path)
        try:
            sha = file_sha256(path)
            existing = self.store.find_document(key)
        except (OSError, StoreError):
            return None
        # An unchanged file is read again when some of its stored events are damaged: that restores them.
        if (existing is not None and not existing.partial and existing.content_sha256 == sha
                and not self.store.damaged_events(existing.id)):
            return IngestResult(key, display_path, "unchanged", existing.n_tokens, existing.n_events)
        return None

    def ingest_one(self, path: Path, display_path: str, progress: IngestProgress) -> IngestResult:
        """Read one file (not unchanged) and commit it, resuming a partial one from its checkpoint."""
        start = time.perf_counter()
        key = str(path)
        doc: SourceDocument | None = None
        tokens: DocumentTokens | tuple = ()
        document_pass: DocumentPass | None = None
        try:
            existing = self.store.find_document(key)
            try:
                doc = load_document(path, display_path, spool_dir=self.store.path,
                                    on_page=lambda page, pages: progress.document_reading(display_path, page, pages))
            except NothingToRead as exc:
                return IngestResult(key, display_path, "skipped", error=str(exc))
            # counted now (shown: seconds on a large file), tokenized again chunk by chunk in the pass
            tokens = DocumentTokens(self.model, doc.text,
                                    on_count=lambda done, total: progress.document_counting(display_path, done, total))
            record = DocumentRecord(
                path=key, display_path=display_path, kind=doc.kind, content_sha256=doc.content_sha256,
                n_tokens=len(tokens), n_events=0, n_pages=doc.n_pages, n_lines=doc.n_lines, ingest_seconds=0.0,
                segmenter=self.segmenter,
            )
            reading = time.perf_counter()
            if self.result_limit is not None and self.bytes_needed(doc, len(tokens)) > self.result_limit:
                return IngestResult(key, display_path, "deferred", len(tokens))
            document_pass = DocumentPass(self.store, self.session, self.sink, self.embedder, self.params, self.rope,
                                         self.keeper, doc, tokens, record, self.commit_every, progress.tokens_done,
                                         start)
            resume = document_pass.resumable(existing)
            progress.document_started(display_path, len(tokens), resume[0].window.next_token if resume else 0)
            saved = document_pass.run(resume, existing if resume else None)
            seconds = time.perf_counter() - start
            extract = reading - start
            passed = document_pass.embed_seconds + document_pass.commit_seconds
            return IngestResult(key, display_path, "ingested", len(tokens), saved.n_events, seconds, note=doc.note,
                                stage_seconds={"extract": extract, "read": seconds - extract - passed,
                                               "embed": document_pass.embed_seconds,
                                               "commit": document_pass.commit_seconds})
        except (StoreError, EpiError) as exc:  # SourceError is an EpiError
            self._stop_if_disk_full(exc, doc, len(tokens))
            return IngestResult(key, display_path, "failed", seconds=time.perf_counter() - start,
                                error=str(exc) + _kept(document_pass))
        except MemoryError:
            return IngestResult(key, display_path, "failed",
                                error="out of memory while ingesting this document" + _kept(document_pass))
        except Exception as exc:  # noqa: BLE001 - one document's unexpected failure must not stop the others
            self._stop_if_disk_full(exc, doc, len(tokens))
            kept = _kept(document_pass) or " (nothing of this file was stored)"
            return IngestResult(key, display_path, "failed", seconds=time.perf_counter() - start,
                                error=f"unexpected {type(exc).__name__}: {exc}{kept}")
        finally:
            if doc is not None:
                doc.close()  # a long text's spool file goes with it

    def finish_run(self) -> None:
        """After the last file: window files of documents that are no longer partial go."""
        partial = {d.id for d in self.store.documents() if d.partial}
        remove_stale_snapshots(self.store.path, partial)

    def _stop_if_disk_full(self, exc: BaseException, doc: SourceDocument | None, n_tokens: int) -> None:
        """Out of space, every later file would fail the same way: end the run here with what it would take."""
        if not is_disk_full(exc):
            return
        needed = self.bytes_needed(doc, n_tokens)
        free = shutil.disk_usage(self.store.path).free
        what = f" for {doc.display_path}" if doc is not None else ""
        raise DiskFullError(f"disk full: {needed / MB:,.0f} MB needed{what}, {free / MB:,.0f} MB free at "
                            f"{self.store.path}; free some space and run the same command again (the files "
                            "committed before it are kept)") from exc

    def bytes_needed(self, doc: SourceDocument | None, n_tokens: int) -> int:
        """Disk one document takes in the store, estimated: its KV blocks as far as the budget will keep them
        (tokens x 2 for K and V x layers x KV heads x head size, at the block type's bytes per value), in SQLite
        its text twice (the events and the full-text index) plus an embedding row per event, doubled for the
        transaction's journal, and for a document committed in groups one checkpoint window file (window_bytes)."""
        values = 2 * self.model.info.n_layer * self.model.info.n_head_kv * self.rope.head_dim
        kv = 0.0
        if self.keeper is not None:
            kv = n_tokens * values * KV_VALUE_BYTES.get(self.keeper.kind, 2.0)
            kv = min(kv, max(0, self.store.kv_budget - self.store.kv_space().used_bytes()))
        text = doc.text_bytes if doc is not None else 0
        events = n_tokens // max(self.params.min_tokens, 1) + 1
        sqlite = 2 * (2 * text + events * EMBEDDING_ROW_BYTES)
        window = self.window_bytes() if n_tokens > self.commit_every * self.params.min_tokens else 0
        return max(int(kv + sqlite + window), MB)

    def window_bytes(self) -> int:
        """The most a checkpoint window file holds: the cells the pass keeps for the next batch (the context less
        one batch: the sink and the local span or the undecided event) in the session's F16 cache (23,040 bytes a
        cell with the bundled model: 16.16 MB measured for 701 cells of 1,280; bench/ingest/window_size.py)."""
        per_cell = 2 * self.model.info.n_layer * self.model.info.n_head_kv * self.rope.head_dim * 2
        return (self.session.n_ctx - INGEST_BATCH) * per_cell

    def close(self) -> None:
        self.session.close()
