"""Position-free attention keys of a captured block: the rows whose similarities boundary refinement compares
(EM-LLM 3.3, eq. 2) and the representative keys each event keeps (EM-LLM 3.4, chosen as in InfLLM).

llama.cpp keeps K after RoPE, rotated by each cell's position, and positions change: the ingest window moves cells
down (K-shift), kv mode loads blocks at new places. The rotation is undone here, so two keys compare by their tokens
and contexts, not by where they sat (InfLLM keeps block keys unrotated for the same reason). Measured on the bundled
model: 128 tokens prefilled at positions 0 and 500 give unrotated keys equal to 0.03 (f16 rounding; raw K rows
differ by up to 15); on six planted topic changes, modularity over unrotated keys of the layers below missed by
27 tokens on average, over raw K rows by 48.
"""
from __future__ import annotations

from dataclasses import dataclass

import llama_cpp as L
import numpy as np

from ... import native
from .blocks import ParsedBlock
from ..llama.backend import LlamaModel, gpu_offload_supported
from ..llama.gguf import GGUFHeaderError, read_f32_tensor

# The graph's layers, as fractions of the depth (7, 15 and 22 of 30). A single layer's keys are noisy; on 24 planted
# topic changes no depth was clearly best (all layers together did no better), and three keep unrotating cheap.
SIMILARITY_DEPTHS = (0.25, 0.5, 0.75)
REP_KEYS = 4  # representative keys per event and layer (InfLLM's default)
MAX_ROTATED_DIMS = 1024  # native/src/rope_shift.h's EPI_ROPE_MAX_ROT


@dataclass(frozen=True)
class RopeParams:
    head_dim: int
    n_rot: int          # the leading dimensions of each head that are rotated
    freq_base: float
    freq_scale: float   # linear position scaling (YaRN's per-dimension corrections are not undone)
    neox: bool          # NEOX rotates dimension pairs (i, i + n_rot/2), NORM rotates (2i, 2i + 1)
    # ggml's plain RoPE on every layer: NORM or NEOX, no YaRN, attention factor or per-layer base (frequency factors
    # shared by every layer are fine: `freq_factors`). Only then does epi rotate K itself when it moves a block
    # (k_shift); otherwise llama.cpp's K-shift does it.
    plain: bool = False
    freq_factors: tuple[float, ...] | None = None  # Llama 3.1's `rope_freqs`: each pair's angle divided by its factor


# Metadata that makes RoPE more than plain: YaRN / LongRoPE factors (Grok sets its own ext and attention factors),
# NTK alpha (a derived base), sliding-window layers with their own base or width, MLA's split keys, layers without
# RoPE (Granite's `finetuned` switch, `rope_pattern`). A key's presence is enough to leave the move to llama.cpp.
# And the tensors of frequency factors chosen by context length (Phi-3's long and short ones). Llama 3.1's single
# `rope_freqs` tensor, the same for every layer and position, epi applies itself (RopeParams.freq_factors).
_NOT_PLAIN_KEYS = ("rope.scaling.attn_factor", "rope.scaling.yarn_log_multiplier", "rope.scaling.yarn_ext_factor",
                   "rope.scaling.yarn_attn_factor", "rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow",
                   "rope.scaling.alpha", "rope.scaling.finetuned", "rope.freq_base_swa", "rope.dimension_count_swa",
                   "attention.sliding_window", "attention.rope_pattern", "attention.kv_lora_rank")
_FREQ_FACTOR_TENSORS = ("rope_factors",)
ROPE_FREQS = "rope_freqs.weight"


def rope_params(model: LlamaModel) -> RopeParams:
    arch = model.info.architecture
    key_length = model.meta(f"{arch}.attention.key_length")
    head_dim = int(key_length) if key_length else model.info.n_embd // max(L.llama_model_n_head(model.ptr), 1)
    n_rot = model.meta(f"{arch}.rope.dimension_count")
    base = model.meta(f"{arch}.rope.freq_base")
    rope_type = L.llama_model_rope_type(model.ptr)
    # llama.cpp's context scales positions by the trained factor unless the scaling type is "none" (llama-context.cpp)
    scale = 1.0 if model.meta(f"{arch}.rope.scaling.type") == "none" else \
        float(L.llama_model_rope_freq_scale_train(model.ptr)) or 1.0
    n_rot = int(n_rot) if n_rot else head_dim
    factors = _freq_factors(model, n_rot)
    return RopeParams(head_dim=head_dim, n_rot=n_rot, freq_base=float(base) if base else 10000.0, freq_scale=scale,
                      neox=rope_type == L.LLAMA_ROPE_TYPE_NEOX,
                      plain=rope_type in (L.LLAMA_ROPE_TYPE_NORM, L.LLAMA_ROPE_TYPE_NEOX) and _plain_rope(model) and
                      factors != (),
                      freq_factors=factors or None)


def _freq_factors(model: LlamaModel, n_rot: int) -> tuple[float, ...] | None:
    """The model's `rope_freqs` values (n_rot / 2 of them), None when it has none, () when they cannot be used."""
    names = model.tensor_names
    if names is None or ROPE_FREQS not in names:
        return None
    try:
        values = read_f32_tensor(model.path, ROPE_FREQS)
    except (GGUFHeaderError, OSError):
        return ()
    return tuple(values) if values is not None and len(values) == n_rot // 2 else ()


def _plain_rope(model: LlamaModel) -> bool:
    arch = model.info.architecture
    if model.meta(f"{arch}.rope.scaling.type") not in (None, "none", "linear"):
        return False
    if any(model.meta(f"{arch}.{key}") is not None for key in _NOT_PLAIN_KEYS):
        return False
    names = model.tensor_names
    return names is not None and not any(part in name for name in names for part in _FREQ_FACTOR_TENSORS)


def k_shift_left_to_llama_cpp(rope: RopeParams, model: LlamaModel) -> str | None:
    """Why a moved block's K is left to llama.cpp's K-shift with this model (a clause), or None when epi rotates it."""
    if not rope.plain or rope.n_rot > min(rope.head_dim, MAX_ROTATED_DIMS) or rope.n_rot % 2:
        return "this model's RoPE has scaling, per-context factors or per-layer variants that epi does not reproduce"
    if model.n_gpu_layers > 0 and gpu_offload_supported():
        # CUDA and Metal compute their RoPE angles their own way, and a shift there costs next to nothing
        return "the KV cache is on a GPU backend"
    return None


def k_shift(rope: RopeParams, model: LlamaModel) -> native.RopeShift | None:
    """How to rotate K for a block moved to a new position (delta 0 here; kv/blocks.py sets it), or None when the move
    is left to llama.cpp's K-shift at the next decode (k_shift_left_to_llama_cpp says why)."""
    if k_shift_left_to_llama_cpp(rope, model) is not None:
        return None
    return native.RopeShift(delta=0, head_dim=rope.head_dim, n_rot=rope.n_rot, neox=rope.neox,
                            freq_base=rope.freq_base, freq_scale=rope.freq_scale,
                            fused=native.rope_shift_fused_default(), freq_factors=rope.freq_factors)


def unrotated_keys(k: np.ndarray, positions: np.ndarray, rope: RopeParams) -> np.ndarray:
    """float32 copy of K [..., n_cells, n_heads * head_dim] with each cell's rotation by its position undone."""
    shape = k.shape
    x = np.asarray(k, dtype=np.float32).reshape(*shape[:-1], -1, rope.head_dim).copy()
    half = rope.n_rot // 2
    inv_freq = rope.freq_base ** (-2.0 * np.arange(half) / rope.n_rot)
    if rope.freq_factors is not None:
        inv_freq = inv_freq / np.asarray(rope.freq_factors, dtype=np.float64)
    theta = positions.astype(np.float64)[:, None] * rope.freq_scale * inv_freq  # [n_cells, half]
    cos = np.cos(theta).astype(np.float32)[:, None, :]  # broadcast over heads
    sin = np.sin(theta).astype(np.float32)[:, None, :]
    if rope.neox:
        a, b = x[..., :half], x[..., half : rope.n_rot]
    else:
        a, b = x[..., 0 : rope.n_rot : 2], x[..., 1 : rope.n_rot : 2]
    a0 = a.copy()
    a[...] = a0 * cos + b * sin  # the rotation by -theta
    b[...] = b * cos - a0 * sin
    return x.reshape(shape)


def _in_position_order(block: ParsedBlock) -> tuple[np.ndarray, np.ndarray]:
    """Cell indices sorted by position (the sliding window reuses freed cells, so cell order is not token order)."""
    order = np.argsort(block.positions, kind="stable")
    return order, block.positions[order]


def similarity_keys(block: ParsedBlock, rope: RopeParams) -> np.ndarray:
    """[n_cells, d], one row per token in position order, whose dot products form the refinement graph (EM-LLM eq. 2,
    dot-product similarity): every KV head of the layers at SIMILARITY_DEPTHS side by side, so A_ij is the sum of the
    per-head similarities over those heads and layers (their mean, up to a constant the objectives ignore)."""
    layers = sorted({min(block.n_layer - 1, int(f * block.n_layer)) for f in SIMILARITY_DEPTHS})
    order, positions = _in_position_order(block)
    keys = unrotated_keys(block.k[layers][:, order], positions, rope)  # [layers, n, n_embd_k]
    return keys.transpose(1, 0, 2).reshape(len(order), -1)


def representative_keys(block: ParsedBlock, rope: RopeParams, r: int = REP_KEYS) -> np.ndarray:
    """float16 [n_layer, min(r, n_cells), n_embd_k]: per layer, the unrotated keys of the r tokens (in position order)
    most similar on average to the block's other keys, k_i . (sum_j k_j - k_i). InfLLM takes the tokens that receive
    the most attention inside the block; llama.cpp keeps no queries, so a key that many keys resemble stands in."""
    order, positions = _in_position_order(block)
    keys = unrotated_keys(block.k[:, order], positions, rope)  # [n_layer, n, n_embd_k]
    r = min(r, keys.shape[1])
    score = np.einsum("lne,lne->ln", keys, keys.sum(axis=1, keepdims=True) - keys)
    top = np.sort(np.argsort(-score, axis=1, kind="stable")[:, :r], axis=1)
    return np.take_along_axis(keys, top[:, :, None], axis=1).astype(np.float16)
