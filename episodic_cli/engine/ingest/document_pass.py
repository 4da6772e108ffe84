"""One document through the llama.cpp pass, committed in groups of events (checkpoints) so that hours of work on a
long document survive an interruption, and resumable from the last group.

Events are cut as soon as their surprise is known, while their KV is still in the window, and their blocks kept
then (EM-LLM's segmentation, `segment.StreamingSegmenter`). Every `commit_every` events the pass commits the group:
its events are embedded and appended to the store with a checkpoint (checkpoint.py) in one transaction. A document
that ends before its first group is full is committed in one transaction instead, replacing any earlier version
atomically (most files); a longer one becomes a 'partial' document at its first group (an earlier version is then
replaced) and complete after its last.
"""
from __future__ import annotations

import errno
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace

import time

import numpy as np

from ...store import DocumentRecord, EventRecord, Store
from ...store.kv_tier import block_key
from .checkpoint import Checkpoint, read_snapshot, remove_older_snapshots, snapshot_path, write_snapshot
from .code_cuts import CodeCuts
from ..embed.embedder import Embedder
from ..kv.keys import RopeParams, similarity_keys
from ..heap import release_free_memory
from ..kv.keeper import BlockKeeper, read_window
from ..kv.blocks import ParsedBlock
from ..llama.backend import LlamaSession, WindowState
from .segment import SegmentParams, StreamingSegmenter
from .sliding_array import SlidingArray
from ..documents.sources import SourceDocument
from .token_stream import DocumentTokens

DEFAULT_COMMIT_EVERY = 64


@dataclass(frozen=True)
class DecidedEvent:
    """What a committed event needs of the per-token arrays, taken when it is decided: those arrays keep only a
    window of the document, and a group is committed up to `commit_every` events later."""

    token_start: int
    token_end: int
    char_start: int
    char_end: int
    surprise_mean: float
    surprise_max: float


class DocumentPass:
    def __init__(self, store: Store, session: LlamaSession, sink: np.ndarray, embedder: Embedder,
                 params: SegmentParams, rope: RopeParams, keeper: BlockKeeper | None, doc: SourceDocument,
                 tokens: DocumentTokens, record: DocumentRecord, commit_every: int,
                 on_progress: Callable[[int], None], started: float):
        self.store, self.session, self.sink, self.embedder = store, session, sink, embedder
        self.params, self.rope, self.keeper = params, rope, keeper
        self.doc, self.tokens, self.record = doc, tokens, record
        self.commit_every = max(1, commit_every)
        self.on_progress = on_progress
        self.started = started  # perf_counter() when this run took the document up (ingest_seconds)
        # this run's seconds in the two stages beside the model's reading (IngestResult.stage_seconds)
        self.embed_seconds = self.commit_seconds = 0.0
        # Per-token arrays hold a window: what the segmenter and the batch ahead still read (memory stays flat).
        self.offsets, self.clean = tokens.offsets, tokens.clean
        self.surprise = SlidingArray(len(tokens), np.float32)
        self.segmenter = StreamingSegmenter(self.surprise, self.clean, params, self._keys_of, self._code_cut_costs())
        self.pending: list[DecidedEvent] = []         # decided events not committed yet
        self.committed = 0                            # events committed (the next ordinal)
        self.document: DocumentRecord | None = None   # the partial document once its first group is committed
        self._refine_reads: dict[int, ParsedBlock] = {}  # event start -> the window read that refined its end

    def _code_cut_costs(self):
        """For a code file, the cost of each cut (code_cuts.py): events follow its definitions; None for prose."""
        if self.doc.kind != "code" or self.params.code_cuts != "definitions":
            return None
        if not isinstance(self.doc.text, str):  # a code file too long to hold (a dump, generated code): cut as prose
            return None
        cuts = CodeCuts(self.doc.text, python=self.doc.path.suffix.lower() in (".py", ".pyi"))
        return lambda start, lo, hi: cuts.costs(self.offsets, self.clean, start, lo, hi, self.params.max_tokens)

    # -- what a checkpoint is valid for --------------------------------------------------------------------------

    def valid_for(self) -> dict:
        return {"content_sha256": self.doc.content_sha256, "n_tokens": int(len(self.tokens)),
                "params": self.params.as_dict(), "segmenter": self.record.segmenter}

    def resumable(self, existing: DocumentRecord | None) -> tuple[Checkpoint, bytes] | None:
        """The checkpoint of a partial document of this very content, pass and model, with its window file."""
        if existing is None or not existing.partial:
            return None
        checkpoint = Checkpoint.from_json(existing.checkpoint)
        if checkpoint is None or checkpoint.valid_for != self.valid_for() or checkpoint.n_events != existing.n_events:
            return None
        blob = read_snapshot(snapshot_path(self.store.path, existing.id, checkpoint.window.next_token))
        if blob is None or (checkpoint.window_sha256 and hashlib.sha256(blob).hexdigest() != checkpoint.window_sha256):
            return None  # missing or damaged: the document is read from its start (what was committed stays meanwhile)
        return checkpoint, blob

    # -- the pass ----------------------------------------------------------------------------------------------------

    def run(self, resume: tuple[Checkpoint, bytes] | None = None, document: DocumentRecord | None = None
            ) -> DocumentRecord:
        """Read the document (from `resume`'s checkpoint of the partial `document`, if given) and commit it."""
        window = None
        if resume is not None:
            checkpoint, blob = resume
            self.document, self.committed = document, checkpoint.n_events
            self.tokens.start_at(checkpoint.surprise_from)  # <= the segmenter's start: nothing before is read
            self.surprise.release_before(checkpoint.surprise_from)
            self.segmenter.restore(checkpoint.segmenter_start, checkpoint.scored, checkpoint.candidates)
            tail = checkpoint.unpack_surprise()
            self.surprise[checkpoint.surprise_from : checkpoint.surprise_from + len(tail)] = tail
            window = (checkpoint.window, blob)
        self.session.surprise_pass(self.tokens.tokens, self.sink, self.params.local, self.on_progress,
                                   self._on_decoded, self._on_batch, window, self.surprise,
                                   self.clean if self.params.surprise_at == "clean" else None)
        events = self._events(self.pending)
        committing = time.perf_counter()
        seconds = committing - self.started
        try:
            if self.document is None:  # short enough for one transaction: replaces any earlier version atomically
                return self.store.replace_document(replace(self.record, n_events=len(events), ingest_seconds=seconds),
                                                   events)
            self.store.append_events(self.document.id, events, None)
            return self.store.finish_document(self.document.id, seconds)
        finally:
            self.commit_seconds += time.perf_counter() - committing
            release_free_memory()

    def _keys_of(self, a: int, b: int) -> np.ndarray:
        self._refine_reads[a] = read_window(self.session, a, b)
        return similarity_keys(self._refine_reads[a], self.rope)

    def _on_decoded(self, surprise: SlidingArray, known: int) -> int:
        for a, b in self.segmenter.advance(known):
            s = self.surprise[a:b]
            s = s[~np.isnan(s)]  # the tokens whose surprise was measured (segment.SURPRISE_AT)
            mean, peak = (float(s.mean()), float(s.max())) if len(s) else (0.0, 0.0)
            event = DecidedEvent(a, b, int(self.offsets[a]), int(self.offsets[b]), mean, peak)
            self._keep_block(self._refine_reads.pop(a, None), event)
            self.pending.append(event)
        first_needed = self.segmenter.needs_from()
        self.tokens.release_before(first_needed)
        self.surprise.release_before(first_needed)
        return self.segmenter.start

    def _keep_block(self, refine_read: ParsedBlock | None, event: DecidedEvent) -> None:
        """Offer the event's KV block (and its representative keys) to the segmenter's tier, unless the tier holds
        it already (a resumed or repeated ingest of the same text computes the same block under the same key)."""
        a, b = event.token_start, event.token_end
        key = block_key(self.doc.content_sha256, event.char_start, event.char_end)
        if self.keeper is None or self.keeper.has(key):
            return
        pos = self.session.cache_pos
        block = refine_read.cells_in(pos(a), pos(b - 1) + 1) if refine_read is not None else read_window(
            self.session, a, b)
        self.keeper.offer(key, block, on_use=False)

    def _on_batch(self, state: WindowState) -> None:
        if len(self.pending) >= self.commit_every:
            self._checkpoint(state)

    def _checkpoint(self, state: WindowState) -> None:
        """Commit the pending events with the state to go on from `state`: the window file first, then one
        transaction that names it."""
        events = self._events(self.pending)
        committing = time.perf_counter()
        if self.document is None:
            self.document = self.store.begin_document(self.record)
        start, scored, candidates = self.segmenter.state()
        surprise_from = max(0, min(start, scored - self.params.tau))
        blob = self.session.window_blob()
        checkpoint = Checkpoint(
            window=state, n_events=self.committed + len(events), segmenter_start=start, scored=scored,
            candidates=candidates, surprise_from=surprise_from,
            surprise=Checkpoint.pack_surprise(self.surprise[surprise_from : state.next_token + 1]),
            valid_for=self.valid_for(), window_sha256=hashlib.sha256(blob).hexdigest())
        path = snapshot_path(self.store.path, self.document.id, state.next_token)
        try:
            write_snapshot(path, blob)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            # No room for a second window beside the last checkpoint's (~16 MB each): give that one up and write
            # again, or a small disk fails here on every resume. A crash before the commit below then reads the
            # document again from its start instead of resuming it; nothing committed is lost.
            remove_older_snapshots(path)
            write_snapshot(path, blob)
        self.store.append_events(self.document.id, events, checkpoint.to_json())
        remove_older_snapshots(path)
        self.commit_seconds += time.perf_counter() - committing
        self.committed += len(events)
        self.pending = []
        release_free_memory()  # else the C heap keeps the group's freed buffers and RSS creeps (heap.py)

    def _events(self, decided: list[DecidedEvent]) -> list[EventRecord]:
        """The records of decided events, embedded (per group: memory does not grow with the document)."""
        events = []
        for ordinal, e in enumerate(decided, self.committed):
            c0, c1 = e.char_start, e.char_end
            page_start, page_end, line_start, line_end = self.doc.locate(c0, c1)
            events.append(EventRecord(
                ordinal=ordinal, token_start=e.token_start, token_end=e.token_end, char_start=c0, char_end=c1,
                page_start=page_start, page_end=page_end, line_start=line_start, line_end=line_end,
                surprise_mean=e.surprise_mean, surprise_max=e.surprise_max, text=self.doc.text[c0:c1],
                section=self.doc.section(c0, c1),
            ))
        if events:
            embedding = time.perf_counter()
            for ev, vec in zip(events, self.embedder.embed_texts([e.text for e in events])):
                ev.embedding = vec
            self.embed_seconds += time.perf_counter() - embedding
        return events
