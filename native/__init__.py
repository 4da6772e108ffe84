"""Native kernels for epi's hot paths. Each kernel has a numpy twin in `reference.py` that the tests compare against."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from ._kernels import assemble_state_blob as _assemble_state_blob
from ._kernels import block_scores as _block_scores
from ._kernels import dequantize as _dequantize
from ._kernels import eval_gate_address as _eval_gate_address
from ._kernels import quantize as _quantize
from ._kernels import crc32, crc32_folding, rope_shift_fused_default, set_simd, simd_usable
from ._kernels import scale_rows as _scale_rows
from ._kernels import select_blocks as _select_blocks
from ._kernels import surprise as _surprise

QuantKind = Literal["f16", "q8_0", "q4_0"]
# (values, bytes) per block; layouts are ggml's block_q8_0 / block_q4_0, f16 is plain little-endian half.
BLOCK_SHAPE: dict[str, tuple[int, int]] = {"f16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}


def surprise_at(logits_address: int, n_rows: int, n_vocab: int, targets: np.ndarray) -> np.ndarray:
    """-log p(target | row) for each of `n_rows` float32 logit rows starting at `logits_address` (no copy of the rows)."""
    targets = np.ascontiguousarray(targets, dtype=np.int32)
    if targets.shape != (n_rows,):
        raise ValueError(f"targets must have shape ({n_rows},), got {targets.shape}")
    if n_rows and (targets.min() < 0 or targets.max() >= n_vocab):
        raise ValueError("target token id outside the vocabulary")
    out = np.empty(n_rows, dtype=np.float32)
    if n_rows:
        _surprise(logits_address, n_rows, n_vocab, targets, out)
    return out


def surprise(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Same as `surprise_at` for a [n_rows, n_vocab] float32 array (used by tests and benchmarks)."""
    logits = np.ascontiguousarray(logits, dtype=np.float32)
    return surprise_at(logits.ctypes.data, logits.shape[0], logits.shape[1], targets)


def _block_shape(kind: str, n_values: int) -> tuple[int, int]:
    if kind not in BLOCK_SHAPE:
        raise ValueError(f"unknown quantization kind {kind!r}; expected one of {sorted(BLOCK_SHAPE)}")
    values, nbytes = BLOCK_SHAPE[kind]
    if n_values % values:
        raise ValueError(f"{kind}: last axis ({n_values}) must be a multiple of {values}")
    return values, nbytes


def quantize(x: np.ndarray, kind: QuantKind) -> np.ndarray:
    """Encode float32 rows [..., n] into uint8 [..., n / block_values * block_bytes] (ggml-identical bytes)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.shape[-1] if x.ndim else 1
    values, nbytes = _block_shape(kind, n)
    out = np.empty(x.shape[:-1] + (n // values * nbytes,), dtype=np.uint8)
    if x.size:
        _quantize(kind, x, out, x.size)
    return out


def dequantize(data: np.ndarray | bytes, kind: QuantKind, n_values: int) -> np.ndarray:
    """Decode uint8 rows [..., row_bytes] holding `n_values` values each into float32 [..., n_values]."""
    data = np.ascontiguousarray(np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray, memoryview))
                                else data, dtype=np.uint8)
    values, nbytes = _block_shape(kind, n_values)
    row_bytes = n_values // values * nbytes
    if data.ndim == 0 or data.shape[-1] != row_bytes:
        raise ValueError(f"{kind}: {n_values} values take {row_bytes} bytes per row, got shape {data.shape}")
    out = np.empty(data.shape[:-1] + (n_values,), dtype=np.float32)
    if out.size:
        _dequantize(kind, data, out, out.size)
    return out


def scale_rows(x: np.ndarray, factors: np.ndarray) -> np.ndarray:
    """x[r, :] * factors[r] for a 2-D float32 x (a new array)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    factors = np.ascontiguousarray(factors, dtype=np.float32)
    if x.ndim != 2 or factors.shape != (x.shape[0],):
        raise ValueError(f"scale_rows: need x [rows, cols] and factors [rows], got {x.shape} and {factors.shape}")
    out = np.empty_like(x)
    _scale_rows(x, factors, out, x.shape[0], x.shape[1])
    return out


def state_blob_size(n_layer: int, n_cells: int, n_embd_k: int, n_embd_v: int) -> int:
    """Bytes of llama.cpp's sequence state blob for these shapes (V transposed or not: the same)."""
    return 16 + 12 * n_cells + 8 + n_layer * (24 + 2 * n_cells * (n_embd_k + n_embd_v))


@dataclass(frozen=True)
class RopeShift:
    """Move a block `delta` positions and rotate its K rows by that much, as llama.cpp's K-shift does (ggml's RoPE
    with the shift as position; plain RoPE, with Llama 3.1's per-pair frequency factors where the model has them; no
    YaRN or attention factor)."""

    delta: int
    head_dim: int       # values per KV head in a K row
    n_rot: int          # leading dimensions of each head that RoPE rotates
    neox: bool          # pairs (i, i + n_rot/2); otherwise (2i, 2i + 1)
    freq_base: float
    freq_scale: float
    fused: bool         # x0*c - x1*s with one rounding, as a llama.cpp built for an FMA CPU: rope_shift_fused_default()
    freq_factors: tuple[float, ...] | None = None  # n_rot / 2 divisors of each pair's angle (`rope_freqs`), or None

    def as_args(self) -> tuple:
        factors = None if self.freq_factors is None else np.asarray(self.freq_factors, dtype=np.float32)
        return (self.delta, self.head_dim, self.n_rot, int(self.neox), self.freq_base, self.freq_scale, self.fused,
                factors)


def assemble_state_blob(kind: QuantKind, positions: np.ndarray, k_rows: np.ndarray, v_rows: np.ndarray, n_layer: int,
                        n_cells: int, n_embd_k: int, n_embd_v: int, v_trans: bool, src_seq: int, cell_seq: int,
                        v_scale: float = 1.0, shift: RopeShift | None = None) -> np.ndarray:
    """llama.cpp's state blob (uint8) from an epi payload's sections, read in place: `positions` (n_cells <i4 bytes),
    `k_rows` / `v_rows` ([n_layer, n_cells] rows of `kind`, contiguous uint8). V is scaled when v_scale != 1.0.
    The numpy reference (engine/kv/blocks.py) is build_state_blob(decode_block(payload, v_scale=v_scale)); with a
    `shift`, its positions move by shift.delta and its K is reference.rope_shift_k(k, shift)."""
    _block_shape(kind, n_embd_k)
    _block_shape(kind, n_embd_v)
    out = np.empty(state_blob_size(n_layer, n_cells, n_embd_k, n_embd_v), dtype=np.uint8)
    _assemble_state_blob(kind, positions, k_rows, v_rows, n_layer, n_cells, n_embd_k, n_embd_v, v_trans, src_seq,
                         cell_seq, float(v_scale), None if shift is None else shift.as_args(), out)
    return out


def block_scores(query: np.ndarray, rep_keys: np.ndarray, rep_count: np.ndarray) -> np.ndarray:
    """float32 [n_layer, n_blocks]: how well each layer's question query (float32 [n_layer, n_head, head_dim],
    unrotated) matches each block's representative keys (float16 [n_blocks, n_layer, n_rep, n_head_kv * head_dim],
    unrotated; the first rep_count[b] rows of block b are real): the mean over those keys of the head-summed dot
    products, KV heads shared by their query-head groups. Reference: reference.block_scores."""
    query = np.ascontiguousarray(query, dtype=np.float32)
    rep_keys = np.ascontiguousarray(rep_keys, dtype=np.float16)
    rep_count = np.ascontiguousarray(rep_count, dtype=np.int32)
    if query.ndim != 3 or rep_keys.ndim != 4 or rep_keys.shape[1] != query.shape[0]:
        raise ValueError(f"block_scores: need query [n_layer, n_head, head_dim] and rep_keys [n_blocks, n_layer, n_rep, "
                         f"n_embd_k], got {query.shape} and {rep_keys.shape}")
    n_layer, n_head, head_dim = query.shape
    n_blocks, _, n_rep, n_embd_k = rep_keys.shape
    if n_embd_k % head_dim or rep_count.shape != (n_blocks,):
        raise ValueError(f"block_scores: n_embd_k {n_embd_k} is not a multiple of head_dim {head_dim}, or rep_count "
                         f"is not [n_blocks]")
    out = np.empty((n_layer, n_blocks), dtype=np.float32)
    _block_scores(query, rep_keys.view(np.uint16), rep_count, n_layer, n_head, n_embd_k // head_dim, head_dim,
                  n_blocks, n_rep, out)
    return out


def select_blocks(scores: np.ndarray, n_tokens: np.ndarray, budget: int) -> np.ndarray:
    """bool [n_layer, n_blocks]: per layer, the best-scoring blocks that fit in `budget` tokens together (greedy by
    falling score, ties to the lower index, a block too big for what is left is passed over). Reference:
    reference.select_blocks."""
    scores = np.ascontiguousarray(scores, dtype=np.float32)
    n_tokens = np.ascontiguousarray(n_tokens, dtype=np.int32)
    if scores.ndim != 2 or n_tokens.shape != (scores.shape[1],):
        raise ValueError(f"select_blocks: need scores [n_layer, n_blocks] and n_tokens [n_blocks], got {scores.shape} "
                         f"and {n_tokens.shape}")
    out = np.empty(scores.shape, dtype=np.uint8)
    _select_blocks(scores, n_tokens, scores.shape[0], scores.shape[1], int(budget), out)
    return out.astype(bool)


def eval_gate_address() -> int:
    """The address of epi_eval_gate (native/src/eval_gate.h), a ggml eval callback for a context's cb_eval, with a
    struct epi_eval_gate * as its user data: closed, it answers every graph node in C (decline an ask, go on after
    a node); open, it forwards to the inner callback."""
    return _eval_gate_address()
