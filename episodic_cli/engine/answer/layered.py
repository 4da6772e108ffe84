"""Layered kv mode: each layer attends to the retrieved blocks its own query selects (EM-LLM 3.4, InfLLM).

kv mode loads the few events retrieval ranks best and every layer attends to all of them. Here a larger pool of
events is loaded (the best hits and their neighbours), and every layer sees only the blocks whose representative
keys its question query matches best, within a token budget per layer:

1. Each pool block is loaded into a sequence of its own (FIRST_BLOCK_SEQ + i) and shared with the answer sequence 0,
   so a layer can hide a block by its sequence; the sink and the question live in sequence 0 alone and can never
   be hidden. A block the tier does not hold is prepared from its text in its own sequence, behind the sink only.
2. Positions (`lane_places`): a pool that fits the answer context is laid out in order, as kv mode lays out its
   blocks. A larger pool (`pool_tokens`, InfLLM's memory beyond the window) is laid out in lanes that share
   positions: each lane is a run of blocks in prompt order ending just before the question, so every block keeps
   its own token order and no position passes the window the model was trained on. The cells beyond the window
   cost memory (the context is made with room for them) and, with flash attention, little time in a layer that
   hides them.
3. Probe: the question part is decoded with retrieval's own events visible (the anchors: its best hits and
   neighbours, up to two thirds of a layer's budget, workspace.LAYERED_ANCHOR_TOKENS, which every layer sees first;
   the whole pool when none is in it) while query_capture reads each layer's queries; their mean (rotation undone,
   as the stored representative keys are) scores every block in every layer (native.block_scores) and each layer
   keeps the best blocks that fit its budget (native.select_blocks).
4. Each layer's hidden blocks are set (layer_visibility: epi's llama.cpp patch) and the question's last token is
   decoded again under them, so the first answer token and every one after it read what each layer selected. The
   question's other cells stay as the probe computed them (reading the anchors, as kv mode's question does):
   decoding the whole question again under the selection (`reread_question`, the design before 2026-11-24) made
   the first token ~0.3 s later and answered no better (docs/layered.md).

A difference from EM-LLM, where selection happens inside the forward pass: the probe's queries of a layer were
computed while the layers below it saw the anchors only, not the blocks they will select, and the selection serves
the answer's tokens rather than the question's. And where InfLLM gives all retrieved memory one position, lanes keep
each block's own token order and end right before the question.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import llama_cpp as L
import numpy as np

from ... import native
from ...store import StoreError
from ...store.kv_tier import StoredBlock
from ..budgets import ANSWER_TOKENS, MAX_POOL, QUESTION_ROOM
from ..errors import EpiError
from ..kv.blocks import (STAGING_SEQ, KVFormatError, ParsedBlock, capture_block, decode_block, encode_block,
                         load_block, parse_state_blob, session_v_trans, state_blob_from_payload)
from ..kv.keeper import BlockKeeper
from ..kv.keys import REP_KEYS, representative_keys, unrotated_keys
from ..llama import layer_visibility
from ..llama.backend import LlamaModel, LlamaSession
from ..llama.query_capture import QueryCapture
from ..retrieval.retrieve import RetrievedEvent
from .kv_mode import TOO_BIG, KVModeAnswerer, Part, _document_sha
from .records import Answer, LayeredReport, stream_into

FIRST_BLOCK_SEQ = STAGING_SEQ + 1


@dataclass(frozen=True)
class _Loaded:
    """A pool block in the cache: its part key, event, positions [p0, p1) and its own sequence."""

    key: tuple
    block_key: bytes
    event_id: int
    p0: int
    p1: int
    seq: int


def lane_places(sizes: list[int], first: int, span: int) -> list[int]:
    """The first position of each block (`sizes` tokens each, in prompt order, best last) in lanes of `span`
    positions starting at `first`: walking back from the last block, blocks are packed to end at first + span, and
    a block that would start before `first` begins a new lane ending there too. With sum(sizes) <= span this is the
    plain in-order layout."""
    places, end = [0] * len(sizes), first + span
    for i in range(len(sizes) - 1, -1, -1):
        if sizes[i] > span:
            raise ValueError(f"a block of {sizes[i]} tokens does not fit a lane of {span} positions")
        if end - sizes[i] < first:
            end = first + span
        places[i] = end = end - sizes[i]
    return places


class LayeredAnswerer(KVModeAnswerer):
    """kv mode over a pool of blocks, each layer seeing the ones its query selects within `budget` tokens."""

    def __init__(self, model: LlamaModel, n_ctx: int, keeper: BlockKeeper, budget: int, flash_attn: bool = True,
                 pool_tokens: int = 0, **kwargs):
        """`budget`: tokens of the pool each layer sees. `anchors` (set before each answer, event ids): blocks every
        layer sees first (retrieval's own choice), the rest of each layer's budget going to its query's choice.
        `flash_attn`: the context computes attention with llama.cpp's flash kernel, which skips hidden cells (with
        it off, every pool cell is multiplied in every layer and hidden ones only masked: the pool's full cost).
        `pool_tokens`: the size of a pool larger than the answer context's room (`n_ctx` positions), laid out in
        lanes that share positions, the context getting the cells it needs beyond `n_ctx`; 0: the pool fits."""
        self.flash_attn = flash_attn
        if not layer_visibility.available():
            raise RuntimeError("per-layer visibility needs epi's patched llama.cpp (engine/llama/layer_visibility.py)")
        self.window = n_ctx
        self.pool_tokens = pool_tokens
        self.rope = keeper.rope
        n_head = int(L.llama_model_n_head(model.ptr))
        self.capture = QueryCapture(model.info.n_layer, n_head, self.rope.head_dim)
        self.budget = budget
        self.anchors: set[int] = set()
        self.reread_question = False  # decode the whole question again under the selection, not its last token
        self.report = LayeredReport()
        self._rep_keys: dict[bytes, np.ndarray] = {}  # block key -> float16 [n_layer, <= REP_KEYS, n_embd_k]
        self._blocks: list[_Loaded] = []  # the pool in the cache, in prompt order
        super().__init__(model, n_ctx, keeper, **kwargs)
        try:  # the patch refuses models whose attention is not the plain KV cache (sliding window, recurrent)
            layer_visibility.set_hidden_seqs(self.session.ctx, -1, [FIRST_BLOCK_SEQ])
            layer_visibility.clear(self.session.ctx)
        except ValueError:
            self.session.close()
            raise EpiError("--layered does not support this model's attention (not a plain KV cache); answer "
                           "without --layered") from None

    def _new_session(self, n_ctx: int, n_threads: int | None) -> LlamaSession:
        room = n_ctx - ANSWER_TOKENS - QUESTION_ROOM  # what a pool that fits takes (Workspace.retrieve)
        cells = n_ctx + max(0, self.pool_tokens - room)  # positions stay below n_ctx; lanes only need more cells
        return LlamaSession(self.model, n_ctx=cells, n_seq_max=FIRST_BLOCK_SEQ + MAX_POOL, n_threads=n_threads,
                            eval_callback=self.capture.callback, eval_user_data=self.capture.user_data,
                            flash_attn=self.flash_attn)

    def stream(self, question: str, retrieved: list[RetrievedEvent], history: list[dict[str, str]] | None,
               started: float, answer: Answer, max_tokens: int = ANSWER_TOKENS,
               should_stop: Callable[[], bool] | None = None, weights: list[float] | None = None,
               spans: list[list[tuple[int, int]]] | None = None, lead_spans: list[str] | None = None
               ) -> Iterator[str]:
        """Load the pool (keeping the blocks a previous question left at the same places), select each layer's
        blocks, stream the answer. Blocks are read whole (`spans` would leave no blocks to choose from)."""
        if len(retrieved) > MAX_POOL:
            raise ValueError(f"a layered pool holds at most {MAX_POOL} events, not {len(retrieved)}")
        self.report = answer.layered = LayeredReport(budget_tokens=self.budget)
        layer_visibility.clear(self.session.ctx)
        parts = self._plan(question, retrieved, history, weights)
        if len(parts) == 1:  # nothing retrieved: the prompt is decoded whole, as kv mode does
            self._drop_blocks(set())
            yield from super().stream(question, retrieved, history, started, answer, max_tokens, should_stop)
            return
        t0 = time.perf_counter()
        sink, events, tail = parts[0], parts[1:-1], parts[-1]
        first = self._sink_in_place(sink, answer)
        stored = {id(p): self._read(p) for p in events}
        for p in events:
            if stored[id(p)] is not None:
                self.tier.touch(p.block_key)
        cold = {id(p): self._event_tokens(p) for p in events if stored[id(p)] is None}
        sizes = [stored[id(p)].n_tokens if stored[id(p)] is not None else len(cold[id(p)]) for p in events]
        present = [(p, n) for p, n in zip(events, sizes) if n]  # an event of no tokens has no block
        span = min(sum(n for _, n in present), self.window - first - max(QUESTION_ROOM, len(tail.tokens)) - max_tokens)
        if span < 0 or any(n > span for _, n in present):
            raise StoreError(TOO_BIG)
        places = lane_places([n for _, n in present], first, span)
        t_load = time.perf_counter()
        self._assemble(present, places, stored, cold, first, answer)
        self.report.load_s = time.perf_counter() - t_load
        question_pos = max([first + span] + [b.p1 for b in self._blocks])  # a re-prepared block may have grown
        if question_pos + len(tail.tokens) + max_tokens > self.window:
            raise StoreError(TOO_BIG)
        pos = self._select_and_decode(tail, question_pos)
        answer.prompt_tokens = first + sum(b.p1 - b.p0 for b in self._blocks) + len(tail.tokens)
        answer.timings.prefill_s = time.perf_counter() - t0
        yield from stream_into(answer, self.session, pos, started, max_tokens, should_stop, lead_spans)

    def reset(self) -> None:
        super().reset()
        self._blocks = []
        self._rep_keys.clear()

    # -- assembly ---------------------------------------------------------------------------------------------

    def _sink_in_place(self, sink: Part, answer: Answer) -> int:
        """Sequence 0 holds the sink and nothing else afterwards; returns its length."""
        memory = self.session.memory
        if self._layout[:1] == [(sink.key, len(sink.tokens))]:
            L.llama_memory_seq_rm(memory, 0, len(sink.tokens), -1)
            answer.reused_tokens += len(sink.tokens)
        else:
            self._drop_blocks(set())
            L.llama_memory_seq_rm(memory, 0, -1, -1)
            if not self._load_sink(sink.tokens):
                self.session.prefill(sink.tokens, 0)
                self._save_sink(sink.tokens)
        self._layout = [(sink.key, len(sink.tokens))]
        return len(sink.tokens)

    def _drop_blocks(self, keep: set[tuple]) -> None:
        """Remove every pool block but those placed as `keep` says ((part key, p0, p1)), cells and sequences."""
        kept = []
        for b in self._blocks:
            if (b.key, b.p0, b.p1) in keep:
                kept.append(b)
            else:
                L.llama_memory_seq_rm(self.session.memory, b.seq, -1, -1)  # its cells go once seq 0 lets go too
        self._blocks = kept

    def _assemble(self, present: list[tuple[Part, int]], places: list[int], stored: dict, cold: dict, first: int,
                  answer: Answer) -> None:
        """Every pool block in its own sequence at its place, and in sequence 0 (which the sink alone held)."""
        memory = self.session.memory
        wanted = {(p.key, p0, p0 + n) for (p, n), p0 in zip(present, places)}
        reusable = {(b.key, b.p0, b.p1): b for b in self._blocks if (b.key, b.p0, b.p1) in wanted}
        self._drop_blocks(set(reusable))
        free = sorted(set(range(FIRST_BLOCK_SEQ, FIRST_BLOCK_SEQ + MAX_POOL)) - {b.seq for b in self._blocks},
                      reverse=True)
        self._cold_total = sum(len(cold[id(p)]) for p, _ in present if id(p) in cold)
        self._cold_done = 0
        blocks = []
        for (part, n), p0 in zip(present, places):
            place = (part.key, p0, p0 + n)
            if place in reusable:
                blocks.append(reusable[place])
                answer.reused_tokens += n
                L.llama_memory_seq_cp(memory, reusable[place].seq, 0, -1, -1)
                continue
            seq = free.pop()
            block = stored[id(part)]
            if block is not None and self._load_into(part, block, seq, p0):
                answer.kv_loaded_tokens += n
            else:  # cold, or a stored block that turned out unusable (its text may tokenize to another length)
                tokens = cold[id(part)] if id(part) in cold else self._event_tokens(part)
                self._prepare_into(part, tokens, seq, first, p0)
                n = len(tokens)
                answer.kv_prefilled_tokens += n
            L.llama_memory_seq_cp(memory, seq, 0, -1, -1)
            blocks.append(_Loaded(part.key, part.block_key, part.retrieved.event.id, p0, p0 + n, seq))
        self._blocks = blocks

    def _load_into(self, part: Part, block: StoredBlock, seq: int, p0: int) -> bool:
        """A stored block into the empty sequence `seq` at `p0`; False when it does not fit this cache after all
        (it is then removed from the tier, to be prepared from text)."""
        try:
            blob = state_blob_from_payload(block.payload, part.v_scale, v_trans=session_v_trans(self.session),
                                           move_to=p0, rope=self.k_shift)
            load_block(self.session, blob, seq, p0)
        except KVFormatError as exc:
            self._discard(part, str(exc))
            return False
        return True

    def _prepare_into(self, part: Part, tokens: np.ndarray, seq: int, first: int, p0: int) -> None:
        """A cold event: decoded in `seq` behind the sink alone (as ingest computes blocks), captured and offered to
        the tier, then moved to `p0`: its captured cells loaded again there with K rotated natively (a `seq_add`
        would leave llama.cpp a K-shift of the whole cache for the probe's decode), or by llama.cpp when the model's
        RoPE is not plain."""
        memory = self.session.memory
        L.llama_memory_seq_cp(memory, 0, seq, 0, first)  # the sink's cells, shared
        self._prefill_cold(tokens, first, seq)
        block = parse_state_blob(capture_block(self.session, seq, first, first + len(tokens)))
        self._captured(part, block)
        if p0 == first:
            L.llama_memory_seq_rm(memory, seq, 0, first)
        elif self.k_shift is not None:
            L.llama_memory_seq_rm(memory, seq, -1, -1)
            blob = state_blob_from_payload(encode_block(block, "f16"), v_trans=session_v_trans(self.session),
                                           move_to=p0, rope=self.k_shift)
            load_block(self.session, blob, seq, p0)
        else:
            L.llama_memory_seq_rm(memory, seq, 0, first)
            L.llama_memory_seq_add(memory, seq, -1, -1, p0 - first)

    # -- representative keys of the pool's blocks -----------------------------------------------------------

    def _read(self, part: Part) -> StoredBlock | None:
        block = super()._read(part)
        if block is not None and part.block_key not in self._rep_keys:
            keys = block.rep_keys
            if keys is None:  # a block stored without them: compute them from its cells
                keys = representative_keys(decode_block(block.payload), self.rope)
            self._rep_keys[part.block_key] = keys
        return block

    def _captured(self, part: Part, block: ParsedBlock) -> None:
        """Offer the block as kv mode does, with the representative keys computed once for the tier and the pool."""
        keys = self._rep_keys[part.block_key] = representative_keys(block, self.rope)
        self.keeper.offer(part.block_key, block, on_use=True, rep_keys=keys, document_sha=_document_sha(part))

    # -- selection ------------------------------------------------------------------------------------------

    def _select_and_decode(self, part: Part, pos: int) -> int:
        """The probe (the question decoded at `pos` with the anchors visible), each layer's selection, then the
        question's last token (or, with `reread_question`, all of it) decoded again under it; the position after it."""
        pool = self._blocks
        if not pool:  # only events of no tokens were retrieved: nothing to select
            return self.session.prefill(part.tokens, pos)
        t0 = time.perf_counter()
        # The probe shows every layer retrieval's own events (which every layer will see), not the whole pool: the
        # queries are then formed in the context the answer keeps, and with flash attention the rest costs nothing.
        others = [b.seq for b in pool if b.event_id not in self.anchors]
        if len(others) < len(pool):
            layer_visibility.set_hidden_seqs(self.session.ctx, -1, others)
        self.capture.arm()
        try:
            self.session.prefill(part.tokens, pos)
        finally:
            self.capture.disarm()
            layer_visibility.clear(self.session.ctx)
        queries = self.capture.queries()
        if queries.shape[1] != len(part.tokens):
            raise EpiError(f"--layered read {queries.shape[1]} query rows for {len(part.tokens)} question tokens from "
                           "this model's graph; answer without --layered")
        visible = self.select(queries, np.arange(pos, pos + len(part.tokens)), pool)
        again = 0 if self.reread_question else len(part.tokens) - 1  # the question tokens kept as the probe left them
        L.llama_memory_seq_rm(self.session.memory, 0, pos + again, -1)
        for layer, row in enumerate(visible):
            layer_visibility.set_hidden_seqs(self.session.ctx, layer, [pool[i].seq for i in np.flatnonzero(~row)])
        sizes = np.array([b.p1 - b.p0 for b in pool])
        self.report.pool_blocks, self.report.pool_tokens = len(pool), int(sizes.sum())
        self.report.lanes = sum(1 for a, b in zip(pool, pool[1:]) if b.p0 < a.p1) + 1
        self.report.event_ids, self.report.visible = [b.event_id for b in pool], visible
        self.report.visible_blocks = [int(n) for n in visible.sum(axis=1)]
        self.report.visible_tokens = [int(n) for n in (visible * sizes).sum(axis=1)]
        self.report.probe_s = time.perf_counter() - t0
        return self.session.prefill(part.tokens[again:], pos + again)

    def select(self, queries: np.ndarray, positions: np.ndarray, pool: list[_Loaded]) -> np.ndarray:
        """bool [n_layer, n_blocks]: the blocks each layer sees, from the question's post-RoPE queries
        ([n_layer, n_tokens, n_head * head_dim] at `positions`)."""
        n_layer = queries.shape[0]
        mean_query = unrotated_keys(queries, positions, self.rope).mean(axis=1)
        mean_query = mean_query.reshape(n_layer, -1, self.rope.head_dim)
        keys = [self._rep_keys[b.block_key] for b in pool]
        n_embd_k = keys[0].shape[2]
        padded = np.zeros((len(pool), n_layer, REP_KEYS, n_embd_k), dtype=np.float16)
        counts = np.zeros(len(pool), dtype=np.int32)
        for i, k in enumerate(keys):
            padded[i, :, : k.shape[1]] = k
            counts[i] = k.shape[1]
        scores = native.block_scores(mean_query, padded, counts)
        anchored = [i for i, b in enumerate(pool) if b.event_id in self.anchors]
        scores[:, anchored] = np.inf  # ranked first in every layer (ties among them: pool order)
        return native.select_blocks(scores, np.array([b.p1 - b.p0 for b in pool], np.int32), self.budget)
