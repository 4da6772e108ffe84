"""Moving a KV block to new positions natively (native/src/rope_shift.c, reached through engine/kv/blocks.py's
`state_blob_from_payload(move_to=..., rope=...)`): K rotated while the block is assembled instead of by llama.cpp's
K-shift inside the next decode.

* Against its numpy reference (`native.reference.rope_shift_k`), NORM and NEOX, fused and not, partial rotation, the
  AVX2 path and the scalar one, signed zeros: at most
  1 f16 ulp apart, on at most 1 value in 10,000 (the reference takes correctly rounded cos/sin, C's cosf/sinf are 1 ulp
  off for a few angles; measured: 0-4 values of 213,120 per case).
* Against llama.cpp itself, on the real bundled model (NORM) and the tiny Qwen2-shaped model (NEOX): a block moved
  natively is bit-identical to the same block moved with `seq_add` once llama.cpp has shifted it, for f16, q8_0 and
  q4_0 payloads and shifts both ways, and the next decode's logits are identical.
* Llama 3.1's frequency factors (one `rope_freqs` tensor for every layer) are applied natively, bit-identical to
  llama.cpp's shift of the same model.
* Models whose RoPE is not plain otherwise (YaRN, per-context factors) are left to llama.cpp, and the test shows why:
  rotating them natively would give other keys than llama.cpp's.
"""
from __future__ import annotations

import ctypes
from dataclasses import replace

import llama_cpp as L
import numpy as np
import pytest

from conftest import license_text
from episodic_cli import native
from episodic_cli.engine.kv import blocks as K
from episodic_cli.engine.diagnostics import block_moves
from episodic_cli.engine.kv.keys import k_shift, rope_params
from episodic_cli.engine.llama.backend import gpu_offload_supported
from episodic_cli.native import reference as R
from tiny_gguf import HEAD_DIM, write_tiny_model

N_LAYER, N_CELLS, N_EMBD = 30, 37, 192
DELTAS = [1, -7, 950, -4000, 123457]


# ------------------------------------------------------------------------------------------- against the reference


def _synthetic_block(seed: int, first: int = 1000) -> K.ParsedBlock:
    rng = np.random.default_rng(seed)
    k = (rng.standard_normal((N_LAYER, N_CELLS, N_EMBD)) * 2).astype(np.float16)
    v = (rng.standard_normal((N_LAYER, N_CELLS, N_EMBD)) * 2).astype(np.float16)
    zeros = rng.choice(k.size, size=k.size // 10, replace=False)  # signed zeros: -(x1*s) must keep its sign
    k.reshape(-1)[zeros] = np.where(rng.random(zeros.size) < 0.5, np.float16(0.0), np.float16(-0.0))
    positions = first + rng.permutation(N_CELLS).astype(np.int32)  # cell order is not position order
    return K.ParsedBlock(positions, k, v, v_trans=False, src_seq=1, cell_seq=1)


@pytest.mark.parametrize("factors", [False, True])  # True: Llama 3.1-style per-pair frequency factors
@pytest.mark.parametrize("n_rot", [64, 32, 24])  # 24: not a multiple of 16, so the scalar path even where AVX2 is
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("neox", [False, True])
def test_native_rotation_matches_the_numpy_reference(neox, fused, n_rot, factors):
    block = _synthetic_block(seed=n_rot + 2 * fused + neox)
    payload = K.encode_block(block, "f16")
    freq_factors = tuple(np.linspace(1.0, 8.0, n_rot // 2, dtype=np.float32).tolist()) if factors else None
    for delta in DELTAS:
        shift = native.RopeShift(delta=delta, head_dim=64, n_rot=n_rot, neox=neox, freq_base=100000.0,
                                 freq_scale=1.0, fused=fused, freq_factors=freq_factors)
        moved = K.parse_state_blob(K.state_blob_from_payload(payload, move_to=1000 + delta, rope=shift))
        want = R.rope_shift_k(block.k, shift)
        ulps = np.abs(moved.k.view(np.int16).astype(np.int32) - want.view(np.int16).astype(np.int32))
        assert ulps.max() <= 1 and np.count_nonzero(ulps) <= ulps.size // 10_000, (delta, np.count_nonzero(ulps))
        # the dimensions past n_rot are not rotated, and the block did move
        assert np.array_equal(moved.k.reshape(N_LAYER, N_CELLS, -1, 64)[..., n_rot:].view(np.uint16),
                              block.k.reshape(N_LAYER, N_CELLS, -1, 64)[..., n_rot:].view(np.uint16))
        assert not np.array_equal(moved.k.view(np.uint16), block.k.view(np.uint16))


def test_a_move_changes_positions_and_k_only():
    block = _synthetic_block(seed=5)
    payload = K.encode_block(block, "q8_0")
    shift = native.RopeShift(delta=0, head_dim=64, n_rot=64, neox=False, freq_base=10000.0, freq_scale=1.0,
                             fused=True)
    still = K.state_blob_from_payload(payload, 0.9)
    assert np.array_equal(K.state_blob_from_payload(payload, 0.9, move_to=1000, rope=shift), still)  # no move
    assert np.array_equal(K.state_blob_from_payload(payload, 0.9, move_to=1500), still)  # no rope: not moved here
    a, b = K.parse_state_blob(still), K.parse_state_blob(
        K.state_blob_from_payload(payload, 0.9, move_to=1500, rope=shift))
    assert np.array_equal(b.positions, a.positions + 500)
    assert np.array_equal(b.v.view(np.uint16), a.v.view(np.uint16))
    with pytest.raises(ValueError, match="cannot rotate"):
        K.state_blob_from_payload(payload, move_to=0, rope=replace(shift, head_dim=48))


# ----------------------------------------------------------------------------------------- against llama.cpp


def _logits(session, n: int) -> np.ndarray:
    ptr = ctypes.cast(L.llama_get_logits(session.ctx), ctypes.POINTER(ctypes.c_float))
    return np.ctypeslib.as_array(ptr, shape=(n, session.model.info.n_vocab)).copy()


def _moved_both_ways(session, payload, first: int, delta: int, rope, probe: np.ndarray):
    """The block loaded `delta` positions away by llama.cpp (seq_add, shifted inside the probe's decode) and by the
    native kernel: ((its cells as llama.cpp then holds them, probe logits), the same for the native move)."""
    out = []
    for native_move in (False, True):
        session.clear()
        blob = K.state_blob_from_payload(payload, v_trans=K.session_v_trans(session),
                                         move_to=first + delta if native_move else None, rope=rope)
        end = K.load_block(session, blob, 0, first + delta)
        session.decode(probe, end, np.ones(len(probe), dtype=np.int8))
        logits = _logits(session, len(probe))
        cells = K.parse_state_blob(K.capture_block(session, 0, first + delta, end))
        out.append((cells, logits))
    session.clear()
    return out


def _check_against_llama_cpp(model, tokens: np.ndarray, deltas) -> None:
    from episodic_cli.engine.llama.backend import LlamaSession

    rope = k_shift(rope_params(model), model)
    if rope is None and model.n_gpu_layers > 0 and gpu_offload_supported():
        pytest.skip("the KV cache is on a GPU backend here, where epi leaves the move to llama.cpp's own K-shift")
    assert rope is not None
    session = LlamaSession(model, n_ctx=2048, n_threads=1, flash_attn=True)
    try:
        session.prefill(tokens[:96], 0)
        captured = K.parse_state_blob(K.capture_block(session, 0, 32, 96))
        probe = tokens[96:104]
        for kind in K.KINDS:
            payload = K.encode_block(captured, kind)
            for delta in deltas:
                (by_llama, logits_llama), (by_epi, logits_epi) = _moved_both_ways(session, payload, 32, delta, rope,
                                                                                  probe)
                assert np.array_equal(by_epi.positions, by_llama.positions)
                assert np.array_equal(by_epi.k.view(np.uint16), by_llama.k.view(np.uint16)), (kind, delta)
                assert np.array_equal(by_epi.v.view(np.uint16), by_llama.v.view(np.uint16))
                assert np.array_equal(logits_epi, logits_llama), (kind, delta)
    finally:
        session.close()


def test_a_block_moved_natively_is_what_llama_cpp_shifts_it_to(bundled_model):
    """SmolLM2 (NORM RoPE, base 100,000): bit-identical K and logits, every payload kind, shifts up and down."""
    _check_against_llama_cpp(bundled_model, bundled_model.tokenize(license_text()), [-31, 7, 950, 1900])


def test_neox_rope_moves_as_llama_cpp_moves_it(tmp_path):
    from episodic_cli.engine.llama.backend import LlamaModel

    model = LlamaModel(write_tiny_model(tmp_path / "qwen2.gguf", arch="qwen2"))
    assert rope_params(model).neox
    _check_against_llama_cpp(model, model.tokenize(license_text()), [-31, 950, 1900])


def test_llama_3_frequency_factors_move_as_llama_cpp_moves_them(tmp_path):
    """A tiny llama with Llama 3.1's `rope_freqs` tensor: epi rotates its blocks itself, bit-identical to llama.cpp."""
    from episodic_cli.engine.llama.backend import LlamaModel

    factors = np.linspace(1.0, 8.0, HEAD_DIM // 2).astype(np.float32)
    model = LlamaModel(write_tiny_model(tmp_path / "llama3.gguf", rope_freqs=factors))
    rope = rope_params(model)
    assert rope.plain and np.array_equal(np.asarray(rope.freq_factors, dtype=np.float32), factors)
    assert k_shift(rope, model).freq_factors == rope.freq_factors
    _check_against_llama_cpp(model, model.tokenize(license_text()), [-31, 950, 1900])


NOT_PLAIN = {
    "yarn": dict(extra_meta={"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0,
                             "llama.rope.scaling.original_context_length": 1024}),
    "yarn_ext_factor": dict(extra_meta={"llama.rope.scaling.yarn_ext_factor": 0.5}),  # Grok sets its own
    "no_rope_switch": dict(extra_meta={"llama.rope.scaling.finetuned": False}),  # Granite's switch for layers w/o RoPE
}


@pytest.mark.parametrize("variant", sorted(NOT_PLAIN))
def test_rope_that_is_not_plain_is_left_to_llama_cpp(tmp_path, variant):
    from episodic_cli.engine.llama.backend import LlamaModel, LlamaSession

    model = LlamaModel(write_tiny_model(tmp_path / f"{variant}.gguf", **NOT_PLAIN[variant]))
    rope = rope_params(model)
    assert not rope.plain and k_shift(rope, model) is None
    assert block_moves(model).startswith("by llama.cpp's K-shift")  # what `epi doctor` says
    if variant != "yarn":
        return  # llama.cpp's llama architecture ignores these keys; other architectures read them
    # Why: the plain rotation epi would apply gives other keys than llama.cpp's shift for this model.
    plain = native.RopeShift(delta=0, head_dim=rope.head_dim, n_rot=rope.n_rot, neox=rope.neox,
                             freq_base=rope.freq_base, freq_scale=rope.freq_scale,
                             fused=native.rope_shift_fused_default())
    session = LlamaSession(model, n_ctx=2048, n_threads=1, flash_attn=True)
    try:
        tokens = model.tokenize(license_text())
        session.prefill(tokens[:96], 0)
        payload = K.encode_block(K.parse_state_blob(K.capture_block(session, 0, 32, 96)), "f16")
        (by_llama, _), (by_plain, _) = _moved_both_ways(session, payload, 32, 950, plain, tokens[96:100])
        assert not np.array_equal(by_plain.k.view(np.uint16), by_llama.k.view(np.uint16))
    finally:
        session.close()
