"""Block quantization kernels: C == numpy reference == ggml (libggml-base from llama-cpp-python), byte for byte.

gguf-py is not a dependency, so the ggml cross-check loads the very libggml-base.so that llama.cpp uses at run time
through ctypes and calls its reference quantizers (quantize_row_q*_0_ref: what ggml_quantize_chunk runs without an
importance matrix) and its dequantizers / fp16 row converters.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

from episodic_cli import native
from episodic_cli.native import reference

KINDS = ("q8_0", "q4_0")
QUANT = {"q8_0": reference.quantize_q8_0, "q4_0": reference.quantize_q4_0}
DEQUANT = {"q8_0": reference.dequantize_q8_0, "q4_0": reference.dequantize_q4_0}


def _edge_blocks() -> np.ndarray:
    """One 32-value block per edge case, stacked as rows."""
    rng = np.random.default_rng(7)
    base = lambda: rng.standard_normal(32).astype(np.float32)  # noqa: E731
    rows = [np.zeros(32, np.float32)]                                   # all zeros: d = 0, id = 0
    r = base(); r[5] = 1e4; rows.append(r)                              # one huge value dominates d
    r = base(); r[9] = -50.0; rows.append(r)                            # negative max: q4_0 d > 0
    r = base(); r[3] = -50.0; r[20] = 50.0; rows.append(r)              # tie in |max|: ggml keeps the first
    rows.append(np.full(32, -3.0, np.float32))                          # constant block
    r = np.arange(32, dtype=np.float32) - 15.5; r[0] = 127.0; rows.append(r)   # q8_0 d = 1: x/d on .5 ties
    r = (np.arange(32, dtype=np.float32) - 16) / 2; r[0] = -8.0; rows.append(r)  # q4_0 d = 1: x/d + 8.5 on .0/.5
    rows.append(np.linspace(-8, 8, 32, dtype=np.float32))               # q4_0: +8 has no code, clamps to 15
    rows.append(base() * np.float32(1e-6))                              # d in fp16's subnormal range
    rows.append(base() * np.float32(1e-9))                              # d underflows fp16 to 0
    rows.append(base() * np.float32(1e-30))                             # tiny but 1/d still finite
    rows.append(base() * np.float32(1e-39))                             # float32 subnormals: 1/d overflows
    r = base(); r[0] = 1e7; rows.append(r)                              # d = amax/127 overflows fp16 -> inf (as ggml)
    r = base() * 1e5; rows.append(r)                                    # q4_0 d = max/8 still finite in fp16
    return np.stack(rows)


def _random(seed: int, n_rows: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # Per-row scales over many decades, like KV rows from different layers/heads.
    return (rng.standard_normal((n_rows, n)) * 10.0 ** rng.uniform(-4, 3, (n_rows, 1))).astype(np.float32)


CASES = [_edge_blocks(), _random(1, 64, 128), _random(2, 3, 4096), _random(3, 1, 32)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_c_matches_numpy_reference_bit_exact(kind, case):
    x = CASES[case]
    with np.errstate(all="ignore"):
        q = native.quantize(x, kind)
        np.testing.assert_array_equal(q, QUANT[kind](x))
        np.testing.assert_array_equal(native.dequantize(q, kind, x.shape[-1]).view(np.uint32),
                                      DEQUANT[kind](q, x.shape[-1]).view(np.uint32))


def test_fp16_conversion_exhaustive():
    # Every fp16 bit pattern decodes exactly and re-encodes to itself (NaNs to the quiet NaN of the same sign).
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    f = native.dequantize(h.view(np.uint8), "f16", h.size)
    np.testing.assert_array_equal(f.view(np.uint32), reference.fp16_to_fp32(h).view(np.uint32))
    back = native.quantize(f, "f16").view(np.uint16)
    nan = np.isnan(f)
    np.testing.assert_array_equal(back[~nan], h[~nan])
    np.testing.assert_array_equal(back[nan], (h[nan] & 0x8000) | 0x7E00)
    # Random float32 bit patterns (every exponent, ties, subnormals, overflow) against numpy's RNE cast.
    bits = np.random.default_rng(0).integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    ties = (np.arange(1 << 16, dtype=np.uint32) << 13) | 0x1000          # exactly halfway between two halves
    x = np.concatenate([bits, ties]).view(np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(native.quantize(x, "f16").view(np.uint16), reference.fp32_to_fp16(x))


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_error_bound(kind):
    # With d32 the float32 scale, d the stored fp16 scale and x' = (q - 8 or q) * d, per block:
    #   q8_0: |x - x'| <= |d32|/2 + 127 |d - d32|    (round to nearest, plus fp16 rounding of d that every q sees;
    #                                               for fp16-normal d that is <= 0.5625 |d|, not |d|/2)
    #   q4_0: |x - x'| <= |d32|/2 + 8 |d - d32|      for x/d32 < 7.5, and
    #         |x - x'| <= |d32|   + 8 |d - d32|      above: +8 has no code (q clamps to 15), the q4_0 asymmetry.
    # A 1e-6 * amax slack covers the float32 products.
    x = _random(11, 256, 256)
    y = native.dequantize(native.quantize(x, kind), kind, x.shape[-1])
    b, e = x.reshape(-1, 32), np.abs(x - y).reshape(-1, 32)
    amax = np.abs(b).max(axis=1)[:, None]
    if kind == "q8_0":
        d32 = amax / np.float32(127)
        d = reference.fp16_to_fp32(reference.fp32_to_fp16(d32))
        assert (e <= np.abs(d32) / 2 + 127 * np.abs(d - d32) + 1e-6 * amax).all()
        normal = np.abs(d) >= 2.0**-14
        assert normal.sum() > len(d) // 2
        assert (e[normal[:, 0]] <= (0.5625 * np.abs(d) + 1e-6 * amax)[normal[:, 0]]).all()
    else:
        d32 = (b[np.arange(len(b)), np.abs(b).argmax(axis=1)] / np.float32(-8))[:, None]
        d = reference.fp16_to_fp32(reference.fp32_to_fp16(d32))
        fp16_term = 8 * np.abs(d - d32) + 1e-6 * amax
        clamped = b / d32 >= 7.5
        assert clamped.any() and (~clamped).any()
        assert (e <= np.where(clamped, np.abs(d32), np.abs(d32) / 2) + fp16_term).all()


def test_output_shapes_and_validation():
    x = np.ones((2, 3, 64), np.float32)
    assert native.quantize(x, "q8_0").shape == (2, 3, 68)
    assert native.quantize(x, "q4_0").shape == (2, 3, 36)
    assert native.dequantize(native.quantize(x, "q4_0"), "q4_0", 64).shape == (2, 3, 64)
    with pytest.raises(ValueError):
        native.quantize(np.ones(33, np.float32), "q8_0")
    with pytest.raises(ValueError):
        native.quantize(x, "q5_1")
    with pytest.raises(ValueError):
        native.dequantize(np.zeros(35, np.uint8), "q8_0", 32)


def test_scale_rows_matches_reference():
    x = _random(5, 37, 96)
    f = np.random.default_rng(5).uniform(-2, 2, 37).astype(np.float32)
    np.testing.assert_array_equal(native.scale_rows(x, f), reference.scale_rows(x, f))
    with pytest.raises(ValueError):
        native.scale_rows(x, f[:-1])


# ------------------------------------------------------------------------------------------ against ggml itself


def _ggml() -> ctypes.CDLL:
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")  # locate only: importing llama_cpp would load the whole runtime
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llama_cpp not installed")
    lib_path = Path(next(iter(spec.submodule_search_locations))) / "lib" / "libggml-base.so"
    if not lib_path.exists():
        pytest.skip(f"{lib_path} not found")
    lib = ctypes.CDLL(str(lib_path))
    f32, u8, u16 = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_uint8), ctypes.POINTER(ctypes.c_uint16)
    for name, argtypes in [("quantize_row_q8_0_ref", [f32, u8]), ("quantize_row_q4_0_ref", [f32, u8]),
                           ("dequantize_row_q8_0", [u8, f32]), ("dequantize_row_q4_0", [u8, f32]),
                           ("ggml_fp32_to_fp16_row", [f32, u16]), ("ggml_fp16_to_fp32_row", [u16, f32])]:
        getattr(lib, name).argtypes = argtypes + [ctypes.c_int64]
        getattr(lib, name).restype = None
    return lib


def _ptr(a: np.ndarray, ctype):
    return a.ctypes.data_as(ctypes.POINTER(ctype))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_bit_exact_against_ggml(kind, case):
    lib = _ggml()
    x = np.ascontiguousarray(CASES[case])
    ours = native.quantize(x, kind)
    theirs = np.empty_like(ours)
    getattr(lib, f"quantize_row_{kind}_ref")(_ptr(x, ctypes.c_float), _ptr(theirs, ctypes.c_uint8), x.size)
    np.testing.assert_array_equal(ours, theirs)
    y = np.empty_like(x)
    getattr(lib, f"dequantize_row_{kind}")(_ptr(theirs, ctypes.c_uint8), _ptr(y, ctypes.c_float), x.size)
    np.testing.assert_array_equal(native.dequantize(ours, kind, x.shape[-1]).view(np.uint32), y.view(np.uint32))


def test_fp16_bit_exact_against_ggml():
    lib = _ggml()
    bits = np.random.default_rng(1).integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    ties = (np.arange(1 << 16, dtype=np.uint32) << 13) | 0x1000
    x = np.concatenate([bits, ties]).view(np.float32)
    theirs = np.empty(x.size, np.uint16)
    lib.ggml_fp32_to_fp16_row(_ptr(x, ctypes.c_float), _ptr(theirs, ctypes.c_uint16), x.size)
    np.testing.assert_array_equal(native.quantize(x, "f16").view(np.uint16), theirs)
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    f = np.empty(h.size, np.float32)
    lib.ggml_fp16_to_fp32_row(_ptr(h, ctypes.c_uint16), _ptr(f, ctypes.c_float), h.size)
    np.testing.assert_array_equal(native.dequantize(h.view(np.uint8), "f16", h.size).view(np.uint32), f.view(np.uint32))
