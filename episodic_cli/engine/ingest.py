"""Ingest: parse -> tokenize -> one llama.cpp pass (surprise) -> events -> embed -> atomic commit per document.

Memory stays bounded by the largest single document: nothing is held across documents, and each document is
committed (or left untouched) on its own, so one failure or a Ctrl-C never loses the documents before it.
"""
from __future__ import annotations

import errno
import shutil
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from ..store import DocumentRecord, EventRecord, Store, StoreError
from ..store.kv_tier import block_key
from .embedder import Embedder
from .errors import EpiError
from .event_keys import rope_params, similarity_keys
from .kv_capture import BlockKeeper, read_window
from .kv_memory import ParsedBlock
from .kv_mode import sink_tokens
from .llama_backend import INGEST_BATCH, LlamaModel, LlamaSession
from .segment import SegmentParams, StreamingSegmenter, clean_cut_mask
from .sources import Skipped, SourceDocument, file_sha256, load_document


@dataclass
class IngestResult:
    path: str
    display_path: str
    status: str               # "ingested" | "unchanged" | "failed" | "skipped"
    tokens: int = 0
    events: int = 0
    seconds: float = 0.0
    error: str | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def as_json(self) -> dict:
        return {"path": self.display_path, "tokens": self.tokens, "events": self.events,
                "seconds": round(self.seconds, 3), "tokens_per_s": round(self.tokens_per_s, 1),
                "status": self.status, **({"error": self.error} if self.error else {})}


MB = 2**20
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

    def document_started(self, display_path: str, n_tokens: int) -> None: ...
    def tokens_done(self, n: int) -> None: ...
    def document_finished(self, result: IngestResult) -> None: ...


class _Silent:
    def document_started(self, display_path: str, n_tokens: int) -> None: ...
    def tokens_done(self, n: int) -> None: ...
    def document_finished(self, result: IngestResult) -> None: ...


def byte_to_char_offsets(text: str, data: bytes) -> np.ndarray:
    """char index for every byte offset 0..len(data) of the UTF-8 encoding of `text`."""
    raw = np.frombuffer(data, dtype=np.uint8)
    starts = (raw & 0xC0) != 0x80
    table = np.empty(len(raw) + 1, dtype=np.int64)
    table[:-1] = np.cumsum(starts) - 1
    table[-1] = len(text)
    # A byte in the middle of a character maps to that character; a boundary byte maps to its own start.
    return table


def token_char_offsets(doc_text: str, token_pieces: list[bytes]) -> np.ndarray:
    """offsets[i] = char offset where token i starts (offsets[n] = len(text)). Byte-level BPE pieces concatenate to
    the exact input; tokenizers that normalise text (SentencePiece's leading space) are mapped proportionally."""
    data = doc_text.encode("utf-8")
    lengths = np.fromiter((len(p) for p in token_pieces), dtype=np.int64, count=len(token_pieces))
    byte_offsets = np.concatenate([[0], np.cumsum(lengths)])
    if byte_offsets[-1] == len(data) and b"".join(token_pieces) == data:
        return byte_to_char_offsets(doc_text, data)[byte_offsets]
    return np.round(byte_offsets / max(byte_offsets[-1], 1) * len(doc_text)).astype(np.int64)


def ingest_context(params: SegmentParams, n_sink: int) -> int:
    """Cells of the ingest pass's context: the sink, the local span (or an undecided event, which reaches back at
    most max_tokens), and one batch, rounded up to llama.cpp's 256-cell padding. Sized to what the pass keeps, not
    larger: llama.cpp attends over every cell up to the highest one in use, live or not, so in a bigger context the
    sliding window's scattered cells would cost attention over the whole context."""
    cells = n_sink + max(params.local, params.max_tokens + 16) + INGEST_BATCH
    return -(-cells // 256) * 256


class Ingestor:
    def __init__(self, store: Store, model: LlamaModel, embedder: Embedder, params: SegmentParams,
                 n_threads: int | None = None, keeper: BlockKeeper | None = None, segmenter: str | None = None):
        self.store = store
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
                result = self._ingest_one(*found, progress)
            progress.document_finished(result)
            yield result

    def _ingest_one(self, path: Path, display_path: str, progress: IngestProgress) -> IngestResult:
        start = time.perf_counter()
        key = str(path)
        doc: SourceDocument | None = None
        tokens = np.empty(0, dtype=np.int32)
        try:
            sha = file_sha256(path)
            existing = self.store.find_document(key)
            if existing is not None and existing.content_sha256 == sha:
                return IngestResult(key, display_path, "unchanged", existing.n_tokens, existing.n_events)
            doc = load_document(path, display_path)
            tokens = self.model.tokenize(doc.text)
            progress.document_started(display_path, len(tokens))
            events = self._segment_and_capture(doc, tokens, progress)
            vectors = self.embedder.embed_texts([e.text for e in events])
            for ev, vec in zip(events, vectors):
                ev.embedding = vec
            seconds = time.perf_counter() - start
            record = DocumentRecord(
                path=key, display_path=display_path, kind=doc.kind, content_sha256=doc.content_sha256,
                n_tokens=len(tokens), n_events=len(events), n_pages=doc.n_pages, n_lines=doc.n_lines,
                ingest_seconds=seconds, segmenter=self.segmenter,
            )
            self.store.replace_document(record, events)  # blocks were made durable one by one as they were kept
            return IngestResult(key, display_path, "ingested", len(tokens), len(events), seconds)
        except (StoreError, EpiError) as exc:  # SourceError is an EpiError
            self._stop_if_disk_full(exc, doc, len(tokens))
            return IngestResult(key, display_path, "failed", seconds=time.perf_counter() - start, error=str(exc))
        except MemoryError:
            return IngestResult(key, display_path, "failed", error="out of memory while ingesting this document")
        except Exception as exc:  # noqa: BLE001 - one document's unexpected failure must not stop the others
            self._stop_if_disk_full(exc, doc, len(tokens))
            return IngestResult(key, display_path, "failed", seconds=time.perf_counter() - start,
                                error=f"unexpected {type(exc).__name__}: {exc} (nothing of this file was stored)")

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
        """Disk one document takes in the store, estimated: its KV blocks (tokens x 2 for K and V x layers x KV
        heads x head size, at the block type's bytes per value) and in SQLite its text twice (the events and the
        full-text index) plus an embedding row per event, doubled for the transaction's journal."""
        kv = 0.0
        if self.keeper is not None:
            values = 2 * self.model.info.n_layer * self.model.info.n_head_kv * self.rope.head_dim
            kv = n_tokens * values * KV_VALUE_BYTES.get(self.keeper.kind, 2.0)
        text = len(doc.text.encode("utf-8")) if doc is not None else 0
        events = n_tokens // max(self.params.min_tokens, 1) + 1
        sqlite = 2 * (2 * text + events * EMBEDDING_ROW_BYTES)
        return max(int(kv + sqlite), MB)

    def _segment_and_capture(self, doc: SourceDocument, tokens: np.ndarray, progress: IngestProgress
                             ) -> list[EventRecord]:
        """The llama.cpp pass; events are cut as soon as their surprise is known, while their KV is still in the
        window, and their blocks captured then. Refining an event reads the window's keys of [start, start +
        max_tokens) once; the event's own block is then cut from that read instead of reading the cache again."""
        table = self.model.pieces()
        token_pieces = [table[t] for t in tokens]
        clean = clean_cut_mask(token_pieces)
        offsets = token_char_offsets(doc.text, token_pieces)
        spans: list[tuple[int, int]] = []
        refine_reads: dict[int, ParsedBlock] = {}  # event start -> the window read that refined its end
        segmenter: StreamingSegmenter | None = None

        def keys_of(a: int, b: int) -> np.ndarray:
            refine_reads[a] = read_window(self.session, a, b)
            return similarity_keys(refine_reads[a], self.rope)

        def on_decoded(surprise: np.ndarray, known: int) -> int:
            nonlocal segmenter
            segmenter = segmenter or StreamingSegmenter(surprise, clean, self.params, keys_of)
            for a, b in segmenter.advance(known):
                self._keep_block(refine_reads.pop(a, None), a, b, block_key(doc.content_sha256, int(offsets[a]),
                                                                            int(offsets[b])))
                spans.append((a, b))
            return segmenter.start

        surprise = self.session.surprise_pass(tokens, self.sink, self.params.local, progress.tokens_done, on_decoded)
        events = []
        for ordinal, (a, b) in enumerate(spans):
            c0, c1 = int(offsets[a]), int(offsets[b])
            page_start, page_end, line_start, line_end = doc.locate(c0, c1)
            s = surprise[a:b]
            events.append(EventRecord(
                ordinal=ordinal, token_start=a, token_end=b, char_start=c0, char_end=c1,
                page_start=page_start, page_end=page_end, line_start=line_start, line_end=line_end,
                surprise_mean=float(s.mean()), surprise_max=float(s.max()), text=doc.text[c0:c1],
                section=doc.section(c0, c1),
            ))
        return events

    def _keep_block(self, refine_read: ParsedBlock | None, a: int, b: int, key: bytes) -> None:
        """Offer event [a, b)'s KV block (and its representative keys) to the segmenter's tier, unless the tier holds
        it already (a resumed or repeated ingest of the same text computes the same block under the same key)."""
        if self.keeper is None or self.keeper.has(key):
            return
        pos = self.session.cache_pos
        if refine_read is not None:
            block = refine_read.cells_in(pos(a), pos(b - 1) + 1)
        else:
            block = read_window(self.session, a, b)
        self.keeper.offer(key, block, on_use=False)

    def close(self) -> None:
        self.session.close()
