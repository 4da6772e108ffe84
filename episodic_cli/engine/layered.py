"""Layered kv mode: each layer attends to the retrieved blocks its own query selects (EM-LLM 3.4, InfLLM).

kv mode loads the few events retrieval ranks best and every layer attends to all of them. Here a larger pool of
events is loaded (the best hits, their neighbours, up to the answer context), and every layer sees only the blocks
whose representative keys its question query matches best, within a token budget per layer:

1. The pool is assembled as kv mode assembles its blocks; each block's cells are then also put in a sequence of
   their own (FIRST_BLOCK_SEQ + i: metadata only in a unified cache), so a layer can hide a block by its sequence.
   The sink and the question live in sequence 0 alone and can never be hidden.
2. Probe: the question part is decoded once with every block visible while query_capture reads each layer's
   queries; their mean (rotation undone, as the stored representative keys are) scores every block in every layer
   (native.block_scores) and each layer keeps the best blocks that fit its budget (native.select_blocks).
3. The probe's cells are removed, each layer's hidden blocks are set (layer_visibility: epi's llama.cpp patch), and
   the question is decoded again; the answer is generated under the same per-layer visibility.

A difference from EM-LLM, where selection happens inside the forward pass: the probe's queries of a layer were
computed while the layers below it saw every block, not only the ones they will see (one probe per question; the
question is a few dozen tokens, so the probe costs one short prefill).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import llama_cpp as L
import numpy as np

from .. import native
from ..store.kv_tier import StoredBlock
from . import layer_visibility
from .errors import EpiError
from .event_keys import REP_KEYS, representative_keys, unrotated_keys
from .kv_capture import BlockKeeper
from .kv_memory import STAGING_SEQ, ParsedBlock, decode_block
from .kv_mode import KVModeAnswerer, _Part
from .llama_backend import LlamaModel, LlamaSession
from .query_capture import QueryCapture

FIRST_BLOCK_SEQ = STAGING_SEQ + 1
MAX_POOL = 64  # events in a pool (sequences the context is created with); the 8k answer context holds ~30 events


@dataclass
class LayeredReport:
    """What the per-layer selection of one answer did (the `"layered"` object of `--json`)."""

    pool_blocks: int = 0
    pool_tokens: int = 0
    budget_tokens: int = 0
    visible_blocks: list[int] = field(default_factory=list)  # per layer
    visible_tokens: list[int] = field(default_factory=list)  # per layer
    probe_s: float = 0.0
    event_ids: list[int] = field(default_factory=list)  # the pool's events, in the order of `visible`'s columns
    visible: np.ndarray | None = None  # bool [n_layer, pool_blocks]

    def as_json(self) -> dict:
        return {"pool_blocks": self.pool_blocks, "pool_tokens": self.pool_tokens, "budget_tokens": self.budget_tokens,
                "visible_blocks": self.visible_blocks, "visible_tokens": self.visible_tokens,
                "probe_s": round(self.probe_s, 4)}


class LayeredAnswerer(KVModeAnswerer):
    """kv mode over a pool of blocks, each layer seeing the ones its query selects within `budget` tokens."""

    def __init__(self, model: LlamaModel, n_ctx: int, keeper: BlockKeeper, budget: int, flash_attn: bool = True,
                 **kwargs):
        """`budget`: tokens of the pool each layer sees. `anchors` (set before each answer, event ids): blocks every
        layer sees first (retrieval's own choice), the rest of each layer's budget going to its query's choice.
        `flash_attn`: the context computes attention with llama.cpp's flash kernel, which skips hidden cells (with
        it off, every pool cell is multiplied in every layer and hidden ones only masked: the pool's full cost)."""
        self.flash_attn = flash_attn
        if not layer_visibility.available():
            raise RuntimeError("per-layer visibility needs epi's patched llama.cpp (engine/layer_visibility.py)")
        self.rope = keeper.rope
        n_head = int(L.llama_model_n_head(model.ptr))
        self.capture = QueryCapture(model.info.n_layer, n_head, self.rope.head_dim)
        self.budget = budget
        self.anchors: set[int] = set()
        self.report = LayeredReport()
        self._rep_keys: dict[bytes, np.ndarray] = {}  # block key -> float16 [n_layer, <= REP_KEYS, n_embd_k]
        super().__init__(model, n_ctx, keeper, **kwargs)
        try:  # the patch refuses models whose attention is not the plain KV cache (sliding window, recurrent)
            layer_visibility.set_hidden_seqs(self.session.ctx, -1, [FIRST_BLOCK_SEQ])
            layer_visibility.clear(self.session.ctx)
        except ValueError:
            self.session.close()
            raise EpiError("--layered does not support this model's attention (not a plain KV cache); answer "
                           "without --layered") from None

    def _new_session(self, n_ctx: int, n_threads: int | None) -> LlamaSession:
        return LlamaSession(self.model, n_ctx=n_ctx, n_threads=n_threads, n_seq_max=FIRST_BLOCK_SEQ + MAX_POOL,
                            eval_callback=self.capture.callback, flash_attn=self.flash_attn)

    def stream(self, question, retrieved, history, started, answer, *args, **kwargs):
        if len(retrieved) > MAX_POOL:
            raise ValueError(f"a layered pool holds at most {MAX_POOL} events, not {len(retrieved)}")
        self._forget_block_sequences()  # the assembly below may drop cells that are still in a block sequence
        self.report = answer.layered = LayeredReport(budget_tokens=self.budget)
        yield from super().stream(question, retrieved, history, started, answer, *args, **kwargs)

    def reset(self) -> None:
        super().reset()
        self._rep_keys.clear()

    # -- representative keys of the pool's blocks -----------------------------------------------------------

    def _read(self, part: _Part) -> StoredBlock | None:
        block = super()._read(part)
        if block is not None and part.block_key not in self._rep_keys:
            keys = block.rep_keys
            if keys is None:  # a block stored without them: compute them from its cells
                keys = representative_keys(decode_block(block.payload), self.rope)
            self._rep_keys[part.block_key] = keys
        return block

    def _captured(self, part: _Part, block: ParsedBlock) -> None:
        """Offer the block as kv mode does, with the representative keys computed once for the tier and the pool."""
        keys = self._rep_keys[part.block_key] = representative_keys(block, self.rope)
        self.keeper.offer(part.block_key, block, on_use=True, rep_keys=keys)

    # -- selection ------------------------------------------------------------------------------------------

    def _pool(self) -> list[tuple[bytes, int, int, int]]:
        """(block key, event id, first position, end position) of every block the cache holds, in position order
        (an event of no tokens has no block)."""
        pool, start = [], 0
        for key, end in self._layout:
            if key[0] == "event" and end > start:
                pool.append((key[2], key[1], start, end))
            start = end
        return pool

    def _forget_block_sequences(self) -> None:
        for seq in range(FIRST_BLOCK_SEQ, FIRST_BLOCK_SEQ + MAX_POOL):
            L.llama_memory_seq_rm(self.session.memory, seq, -1, -1)
        layer_visibility.clear(self.session.ctx)

    def _decode_question(self, part: _Part, pos: int) -> int:
        pool = self._pool()
        if not pool:
            return super()._decode_question(part, pos)
        memory = self.session.memory
        for i, (_, _, p0, p1) in enumerate(pool):
            L.llama_memory_seq_cp(memory, 0, FIRST_BLOCK_SEQ + i, p0, p1)
        t0 = time.perf_counter()
        self.capture.arm()
        try:
            self.session.prefill(part.tokens, pos)
        finally:
            self.capture.disarm()
        queries = self.capture.queries()
        if queries.shape[1] != len(part.tokens):
            raise EpiError(f"--layered read {queries.shape[1]} query rows for {len(part.tokens)} question tokens from "
                           "this model's graph; answer without --layered")
        visible = self.select(queries, np.arange(pos, pos + len(part.tokens)), pool)
        L.llama_memory_seq_rm(memory, 0, pos, -1)
        for layer, row in enumerate(visible):
            hidden = [FIRST_BLOCK_SEQ + i for i in np.flatnonzero(~row)]
            layer_visibility.set_hidden_seqs(self.session.ctx, layer, hidden)
        sizes = np.array([p1 - p0 for _, _, p0, p1 in pool])
        self.report.pool_blocks, self.report.pool_tokens = len(pool), int(sizes.sum())
        self.report.event_ids, self.report.visible = [event_id for _, event_id, _, _ in pool], visible
        self.report.visible_blocks = [int(n) for n in visible.sum(axis=1)]
        self.report.visible_tokens = [int(n) for n in (visible * sizes).sum(axis=1)]
        self.report.probe_s = time.perf_counter() - t0
        return self.session.prefill(part.tokens, pos)

    def select(self, queries: np.ndarray, positions: np.ndarray, pool: list[tuple[bytes, int, int, int]]
               ) -> np.ndarray:
        """bool [n_layer, n_blocks]: the blocks each layer sees, from the question's post-RoPE queries
        ([n_layer, n_tokens, n_head * head_dim] at `positions`)."""
        n_layer = queries.shape[0]
        mean_query = unrotated_keys(queries, positions, self.rope).mean(axis=1)
        mean_query = mean_query.reshape(n_layer, -1, self.rope.head_dim)
        keys = [self._rep_keys[key] for key, _, _, _ in pool]
        n_embd_k = keys[0].shape[2]
        padded = np.zeros((len(pool), n_layer, REP_KEYS, n_embd_k), dtype=np.float16)
        counts = np.zeros(len(pool), dtype=np.int32)
        for i, k in enumerate(keys):
            padded[i, :, : k.shape[1]] = k
            counts[i] = k.shape[1]
        scores = native.block_scores(mean_query, padded, counts)
        anchored = [i for i, (_, event_id, _, _) in enumerate(pool) if event_id in self.anchors]
        scores[:, anchored] = np.inf  # ranked first in every layer (ties among them: pool order)
        return native.select_blocks(scores, np.array([p1 - p0 for _, _, p0, p1 in pool], np.int32), self.budget)
