"""Numpy reference implementations of the native kernels: the definition the C code is tested against."""
from __future__ import annotations

import numpy as np


def surprise(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(logits)[target] per row, computed in float64 (EM-LLM eq. 1's surprise)."""
    x = logits.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    return (lse - x[np.arange(len(targets)), targets]).astype(np.float32)


# ---------------------------------------------------------------------------------- ggml block quantization
# Vectorised twins of ggml's quantize_row_q{8,4}_0_ref / dequantize_row_q{8,4}_0: every step stays in float32 in
# ggml's order, so results are bit-identical, not merely close.
QK = 32


def fp32_to_fp16(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even half precision as uint16 bits (numpy's cast is IEEE RNE; NaN made quiet like ggml)."""
    h = np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint16)
    return np.where(np.isnan(x), (h & 0x8000) | 0x7E00, h).astype(np.uint16)


def fp16_to_fp32(h: np.ndarray) -> np.ndarray:
    """Exact widening; NaNs come out quiet (quiet bit set, payload kept) as ggml's conversion does."""
    f = np.asarray(h, dtype=np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    return np.where(np.isnan(f.view(np.float32)), f | 0x400000, f).astype(np.uint32).view(np.float32)


def _to_int(v: np.ndarray) -> np.ndarray:
    """C's float -> int truncation, with the out-of-range/NaN case pinned to 0 as in quant.c."""
    ok = np.isfinite(v) & (np.abs(v) < 2.0**31)
    return np.where(ok, np.trunc(np.where(ok, v, 0)), 0).astype(np.int64)


def _blocks(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.shape[-1] % QK:
        raise ValueError(f"last axis ({x.shape[-1]}) must be a multiple of {QK}")
    return x.reshape(-1, QK)


def _inverse(d: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", over="ignore"):
        return np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)


def quantize_q8_0(x: np.ndarray) -> np.ndarray:
    b = _blocks(x)
    d = (np.abs(b).max(axis=1) / np.float32(127)).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        v = (b * _inverse(d)[:, None]).astype(np.float64)          # float32 product; float64 makes the next step exact
        q = _to_int(np.trunc(v + np.copysign(0.5, v)))             # C roundf: half away from zero (np.round is to even)
    out = np.concatenate([fp32_to_fp16(d)[:, None].view(np.uint8).reshape(-1, 2),
                          q.astype(np.int8).view(np.uint8)], axis=1)
    return out.reshape(np.shape(x)[:-1] + (-1,))


def quantize_q4_0(x: np.ndarray) -> np.ndarray:
    b = _blocks(x)
    # ggml keeps the first element of largest magnitude (strict <), sign included.
    mx = b[np.arange(len(b)), np.abs(b).argmax(axis=1)]
    d = (mx / np.float32(-8)).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        v = (b * _inverse(d)[:, None]).astype(np.float32) + np.float32(8.5)
        q = np.minimum(15, _to_int(v).astype(np.int8)).astype(np.uint8)
    nib = q[:, : QK // 2] | (q[:, QK // 2 :] << 4)
    out = np.concatenate([fp32_to_fp16(d)[:, None].view(np.uint8).reshape(-1, 2), nib], axis=1)
    return out.reshape(np.shape(x)[:-1] + (-1,))


def dequantize_q8_0(data: np.ndarray, n_values: int) -> np.ndarray:
    blk = np.asarray(data, dtype=np.uint8).reshape(-1, 2 + QK)
    d = fp16_to_fp32(blk[:, :2].copy().view("<u2")[:, 0])
    y = blk[:, 2:].view(np.int8).astype(np.float32) * d[:, None]
    return y.reshape(np.shape(data)[:-1] + (n_values,))


def dequantize_q4_0(data: np.ndarray, n_values: int) -> np.ndarray:
    blk = np.asarray(data, dtype=np.uint8).reshape(-1, 2 + QK // 2)
    d = fp16_to_fp32(blk[:, :2].copy().view("<u2")[:, 0])
    q = np.concatenate([blk[:, 2:] & 0x0F, blk[:, 2:] >> 4], axis=1).astype(np.int8) - np.int8(8)
    y = q.astype(np.float32) * d[:, None]
    return y.reshape(np.shape(data)[:-1] + (n_values,))


def scale_rows(x: np.ndarray, factors: np.ndarray) -> np.ndarray:
    return (np.asarray(x, dtype=np.float32) * np.asarray(factors, dtype=np.float32)[:, None]).astype(np.float32)


# ---------------------------------------------------------------------------------- state blob assembly
# assemble_state_blob has no twin here: its reference is episodic_cli.engine.kv.blocks's own numpy path,
# build_state_blob(decode_block(payload, v_scale=s)), which tests/test_native_assemble.py compares byte for byte.
# With a RopeShift, its K becomes rope_shift_k(K, shift) and its positions move by shift.delta.


def rope_angles(shift) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin (float32 [n_rot / 2]) of each rotated pair's angle for shift.delta, as ggml's rope cache: the angle
    walks down in float32 (theta *= freq_base ** (-2 / n_rot)); cos and sin are taken in float64 and rounded, so they
    are the correctly rounded values, where C's cosf / sinf may be 1 ulp off in a few cases."""
    theta_scale = np.float32(shift.freq_base) ** np.float32(-2.0 / shift.n_rot)  # rounded as C's powf, measured
    theta = np.empty(shift.n_rot // 2, dtype=np.float32)
    t = np.float32(shift.delta)
    for j in range(len(theta)):
        theta[j] = t
        t = np.float32(t * theta_scale)
    factors = getattr(shift, "freq_factors", None)
    if factors is not None:  # ggml_rope_cache_init: theta / ff before the scale, in float32
        theta = (theta / np.asarray(factors, dtype=np.float32)).astype(np.float32)
    angle = (np.float32(shift.freq_scale) * theta).astype(np.float64)
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


def rope_shift_k(k: np.ndarray, shift) -> np.ndarray:
    """float16 K rows [..., n_heads * head_dim] rotated by shift.delta positions as llama.cpp's K-shift computes it:
    each rotated pair (NEOX: i, i + n_rot/2; NORM: 2i, 2i + 1) in float32, then rounded to float16. `fused` takes
    x0*c - x1*s with one rounding (the exact product x0*c in float64, so double rounding is possible only on ties)."""
    x = np.asarray(k, dtype=np.float16).astype(np.float32)
    x = x.reshape(*x.shape[:-1], -1, shift.head_dim).copy()
    cos, sin = rope_angles(shift)
    half = shift.n_rot // 2
    if shift.neox:
        a, b = x[..., :half], x[..., half:shift.n_rot]
    else:
        a, b = x[..., 0:shift.n_rot:2], x[..., 1:shift.n_rot:2]
    x0, x1 = a.copy(), b.copy()
    if shift.fused:
        a[...] = (x0.astype(np.float64) * cos - (x1 * sin).astype(np.float64)).astype(np.float32)
        b[...] = (x0.astype(np.float64) * sin + (x1 * cos).astype(np.float64)).astype(np.float32)
    else:
        a[...] = x0 * cos - x1 * sin
        b[...] = x0 * sin + x1 * cos
    return x.reshape(np.shape(k)).astype(np.float16)


# ---------------------------------------------------------------------------------- per-layer block selection
def block_scores(query: np.ndarray, rep_keys: np.ndarray, rep_count: np.ndarray) -> np.ndarray:
    """EM-LLM 3.4 / InfLLM block relevance, in float64: scores[l, b] = mean over block b's first rep_count[b]
    representative keys k of sum_h query[l, h] . k[g(h)], where KV head g(h) = h // (n_head // n_head_kv)."""
    q = np.asarray(query, dtype=np.float64)
    n_layer, n_head, head_dim = q.shape
    keys = np.asarray(rep_keys, dtype=np.float16).astype(np.float64)
    n_blocks, _, n_rep, n_embd_k = keys.shape
    keys = keys.reshape(n_blocks, n_layer, n_rep, n_embd_k // head_dim, head_dim)
    group = n_head // keys.shape[3]
    per_kv_head = q.reshape(n_layer, keys.shape[3], group, head_dim).sum(axis=2)  # query heads sharing a KV head
    dots = np.einsum("lgd,blrgd->lbr", per_kv_head, keys)
    real = np.arange(n_rep)[None, :] < np.asarray(rep_count)[:, None]  # [n_blocks, n_rep]
    count = np.maximum(np.asarray(rep_count), 1)
    return (np.where(real[None], dots, 0.0).sum(axis=2) / count[None, :]).astype(np.float32)


def select_blocks(scores: np.ndarray, n_tokens: np.ndarray, budget: int) -> np.ndarray:
    """Per layer, greedy by falling score (ties: lower index; NaN last): keep each block that still fits."""
    scores = np.asarray(scores, dtype=np.float32)
    visible = np.zeros(scores.shape, dtype=bool)
    for layer, row in enumerate(scores):
        ranked = np.where(np.isnan(row), -np.inf, row.astype(np.float64))
        left = budget
        for b in sorted(range(len(row)), key=lambda i: (-ranked[i], i)):
            if n_tokens[b] <= left:
                visible[layer, b] = True
                left -= int(n_tokens[b])
    return visible
