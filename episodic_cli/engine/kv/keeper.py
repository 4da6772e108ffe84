"""Blocks into a model's KV tier: the tier a model's blocks belong to, and keeping an event's block there.

Ingest captures each event's cells while its window still holds them (`read_window`); kv mode captures the cells of
an event it has just prepared from text. Both encode the block (f16 / q8_0 / q4_0), compute its representative keys
and offer it to the tier, which keeps it while the store's KV budget allows (store/kv_tier/space.py).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import llama_cpp as L
import numpy as np

from ...store.kv_tier import Admission, Tier, TierConfig
from .keys import RopeParams, representative_keys, rope_params
from .blocks import KIND_BLOCK_TYPE, KINDS, ParsedBlock, capture_block, encode_block, parse_state_blob
from ..llama.backend import LlamaModel, LlamaSession

DEFAULT_KIND = "q8_0"


def tier_config(model: LlamaModel, model_sha256: str, kind: str) -> TierConfig:
    """What a block is only valid for: the contexts of capture and answer must match exactly (docs/how-it-works.md,
    "The llama.cpp context").
    The llama-cpp-python release binds, not epi's local label (0.3.36+epiN): the patches add per-layer masks and a
    flash-attention kernel for one-token decodes, which leave every captured cell's K and V (prompt batches, flash
    attention off) as the unpatched build computes them."""
    head_dim = model.info.n_embd // max(L.llama_model_n_head(model.ptr), 1)
    release = L.__version__.split("+")[0]
    return TierConfig(model_name=model.info.name, model_sha256=model_sha256, llama_cpp_version=release,
                      type_k="f16", type_v="f16", flash_attn=False, n_layer=model.info.n_layer,
                      n_head_kv=model.info.n_head_kv, head_dim=head_dim, block_kind=kind)


def read_window(session: LlamaSession, start: int, end: int) -> ParsedBlock:
    """The cells of document tokens [start, end) in the ingest window (sequence 0 of `surprise_pass`)."""
    return read_cells(session, session.cache_pos(start), session.cache_pos(end - 1) + 1)


def read_cells(session: LlamaSession, p0: int, p1: int) -> ParsedBlock:
    """The cells at positions [p0, p1) of sequence 0 (an answer's cache)."""
    return parse_state_blob(capture_block(session, 0, p0, p1))


_REFUSALS = {
    Admission.NO_BUDGET: "the KV budget is full, so new KV blocks are not kept (answers read those events from their "
                         "text); raise it with `epi config --kv-budget SIZE`",
    Admission.NO_DISK: "the disk is nearly full, so new KV blocks are not kept (answers read those events from their "
                       "text); free some space",
}


# A budget of 0 is a choice (`--no-kv`, `--kv-budget 0`), not a budget that filled up.
NO_BLOCKS_KEPT = ("this store keeps no KV blocks (its KV budget is 0: ingested with --no-kv, or set so), so answers "
                  "read events from their text; `epi config --kv-budget SIZE` keeps them")


class BlockKeeper:
    """Offers blocks to one tier and remembers what became of them; a refusal is told once (`warn`)."""

    def __init__(self, tier: Tier, model: LlamaModel, warn: Callable[[str], None] | None = None):
        self.tier = tier
        self.kind = tier.config.block_kind
        if self.kind not in KINDS:
            raise ValueError(f"unknown KV block type {self.kind!r}; use one of {', '.join(KINDS)}")
        self.rope: RopeParams = rope_params(model)
        self.warn = warn or (lambda message: None)
        self.outcomes: Counter[Admission] = Counter()
        # content sha256 -> whether a document with it is still stored (set by the workspace from the store): an
        # answer's block is offered only while its document exists, so `rm` during an answer leaves no blocks.
        self.document_exists: Callable[[str], bool] | None = None
        self._told = False

    def has(self, key: bytes) -> bool:
        return self.tier.path_of(key).is_file()

    def offer(self, key: bytes, block: ParsedBlock, on_use: bool, rep_keys: np.ndarray | None = None,
              document_sha: str | None = None) -> Admission:
        """Keep an event's block (see KVSpace for when). `on_use`: prepared for an answer, not captured by ingest.
        `rep_keys`: the block's representative keys when the caller has computed them already. `document_sha`:
        the content sha256 of the block's stored document, which must still be there (not for ingest's blocks: their
        document is committed after them)."""
        if rep_keys is None:
            rep_keys = representative_keys(block, self.rope)
        return self.offer_encoded(key, KIND_BLOCK_TYPE[self.kind], block.n_cells, encode_block(block, self.kind),
                                  rep_keys, on_use, document_sha)

    def offer_encoded(self, key: bytes, block_type, n_cells: int, payload, rep_keys: np.ndarray, on_use: bool,
                      document_sha: str | None = None) -> Admission:
        """Keep a block encoded elsewhere (a cluster worker's, engine/ingest/cluster.py), as `offer` would."""
        exists = self.document_exists
        live = None if document_sha is None or exists is None else (lambda: exists(document_sha))
        outcome = self.tier.offer(key, block_type, n_cells, payload, rep_keys, on_use, live)
        self.outcomes[outcome] += 1
        if outcome in _REFUSALS and not self._told:
            self._told = True
            text_only = outcome is Admission.NO_BUDGET and self.tier.space.budget == 0
            self.warn(NO_BLOCKS_KEPT if text_only else _REFUSALS[outcome])
        return outcome

    @property
    def kept(self) -> int:
        return self.outcomes[Admission.WRITTEN] + self.outcomes[Admission.PRESENT]

    @property
    def refused(self) -> int:
        return self.outcomes[Admission.NO_BUDGET] + self.outcomes[Admission.NO_DISK] + self.outcomes[Admission.DEFERRED]
