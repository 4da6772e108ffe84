"""Which KV block format earns its bytes? Fidelity of candidate 4-bit formats against f16 blocks, side by side.

For several places in a real text (the Apache-2.0 license the hnswlib wheel ships), the bundled model prefills three
128-token blocks; the blocks are captured, passed through each format (quantize, then dequantize), loaded back at the
same positions, and the next 32 tokens are decoded. Reported per format: bytes per stored K/V value (and relative to
q8_0), argmax agreement of the 32 probe rows with f16 blocks (mean and worst place), and the mean over places of the
largest logit difference. Adoption rule (issue 11): a format replaces q8_0 only at >= 0.98 agreement and <= 0.6x its
bytes.

Formats (numpy emulations of the arithmetic; a format that were adopted would get a C kernel bit-exact with a numpy
reference, as native/src/quant.c has for q8_0 and q4_0):
- q8_0, q4_0: ggml's per-token blocks of 32 values (epi's kernels, native.quantize / dequantize).
- k8v4: q8_0 K, q4_0 V (K is the more sensitive half: llama.cpp PR #7412).
- had-q4_0 / hadK-q4_0: a 64-point Walsh-Hadamard rotation per head before q4_0 (of K and V / of K only), undone
  after dequantizing (QuaRot-style outlier spreading).
- kivi4*: KIVI's K per channel (asymmetric 4-bit over groups of 32 tokens, one f16 scale and minimum per group),
  with V as q4_0, q8_0, rotated q4_0, or asymmetric 4-bit per 32 channels (q4_1-like).

    python bench/kv/kv_formats.py [--places 9]
"""
from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

import llama_cpp as L
import numpy as np

from episodic_cli import native
from episodic_cli.engine.kv import blocks as K
from episodic_cli.engine.llama.backend import LlamaSession
from episodic_cli.engine.workspace import Workspace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from conftest import license_text  # noqa: E402  (the test suite's real prose)

BLOCK, N_BLOCKS, N_PROBE, HEAD = 128, 3, 32, 64
Q8_0_BYTES = 34 / 32  # bytes per value


def hadamard(n: int = HEAD) -> np.ndarray:
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return (h / np.sqrt(n)).astype(np.float32)  # orthonormal and symmetric: its own inverse


H = hadamard()


def rotate(x: np.ndarray) -> np.ndarray:
    shape = x.shape
    return (x.reshape(*shape[:-1], -1, HEAD) @ H).reshape(shape)


def ggml(x: np.ndarray, kind: str) -> np.ndarray:
    return native.dequantize(native.quantize(x, kind), kind, x.shape[-1]).reshape(x.shape)


def asymmetric(x: np.ndarray, axis: int, group: int, bits: int = 4) -> np.ndarray:
    """Min/max quantization of groups of `group` values along `axis` (KIVI's K per channel: axis = tokens)."""
    moved = np.moveaxis(x, axis, -1)
    shape = moved.shape
    g = moved.reshape(*shape[:-1], -1, group)
    lo, hi = g.min(-1, keepdims=True), g.max(-1, keepdims=True)
    levels = 2**bits - 1
    scale = np.where(hi > lo, (hi - lo) / levels, 1.0)
    out = (np.clip(np.round((g - lo) / scale), 0, levels) * scale + lo).reshape(shape)
    return np.moveaxis(out, -1, axis)


# name -> (bytes per value, K transform, V transform); K and V are float32 [n_layer, n_cells, n_embd]
FORMATS = {
    "f16": (2.0, lambda k: k, lambda v: v),
    "q8_0": (34 / 32, lambda k: ggml(k, "q8_0"), lambda v: ggml(v, "q8_0")),
    "q4_0": (18 / 32, lambda k: ggml(k, "q4_0"), lambda v: ggml(v, "q4_0")),
    "k8v4": ((34 + 18) / 64, lambda k: ggml(k, "q8_0"), lambda v: ggml(v, "q4_0")),
    "had-q4_0": (18 / 32, lambda k: rotate(ggml(rotate(k), "q4_0")), lambda v: rotate(ggml(rotate(v), "q4_0"))),
    "hadK-q4_0": (18 / 32, lambda k: rotate(ggml(rotate(k), "q4_0")), lambda v: ggml(v, "q4_0")),
    "kivi4-v4": ((0.5 + 4 / 32 + 18 / 32) / 2, lambda k: asymmetric(k, 1, 32), lambda v: ggml(v, "q4_0")),
    "kivi4-v8": ((0.5 + 4 / 32 + 34 / 32) / 2, lambda k: asymmetric(k, 1, 32), lambda v: ggml(v, "q8_0")),
    "kivi4-hadv4": ((0.5 + 4 / 32 + 18 / 32) / 2, lambda k: asymmetric(k, 1, 32),
                    lambda v: rotate(ggml(rotate(v), "q4_0"))),
    "kivi4-asymv4": ((0.5 + 4 / 32 + 20 / 32) / 2, lambda k: asymmetric(k, 1, 32), lambda v: asymmetric(v, 2, 32)),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--places", type=int, default=9, help="places in the text to probe (each 3 blocks + 32 tokens)")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    ws = Workspace(threads=args.threads)
    model = ws.model
    session = LlamaSession(model, n_ctx=2048, n_threads=args.threads)
    tokens = model.tokenize(license_text())
    span = BLOCK * N_BLOCKS + N_PROBE
    starts = np.linspace(0, len(tokens) - span - 1, args.places).astype(int)
    agreement = {name: [] for name in FORMATS}
    max_diff = {name: [] for name in FORMATS}

    def probe_logits(probe: np.ndarray) -> np.ndarray:
        session.decode(probe, BLOCK * N_BLOCKS, np.ones(len(probe), dtype=np.int8))
        ptr = ctypes.cast(L.llama_get_logits(session.ctx), ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(ptr, shape=(len(probe), model.info.n_vocab)).copy()

    for start in starts:
        text, probe = tokens[start : start + BLOCK * N_BLOCKS], tokens[start + BLOCK * N_BLOCKS : start + span]
        session.clear()
        session.prefill(text, 0)
        blocks = [K.parse_state_blob(K.capture_block(session, 0, i * BLOCK, (i + 1) * BLOCK)) for i in range(N_BLOCKS)]
        reference = None
        for name, (_, k_form, v_form) in FORMATS.items():
            session.clear()
            for i, b in enumerate(blocks):
                k = k_form(b.k.astype(np.float32)).astype(np.float16)
                v = v_form(b.v.astype(np.float32)).astype(np.float16)
                K.load_block(session, K.ParsedBlock(b.positions, k, v, b.v_trans, b.src_seq, b.cell_seq), 0, i * BLOCK)
            logits = probe_logits(probe)
            reference = logits if reference is None else reference
            agreement[name].append(float(np.mean(logits.argmax(1) == reference.argmax(1))))
            max_diff[name].append(float(np.abs(logits - reference).max()))
    session.close()
    print(f"{len(starts)} places x {N_PROBE} probe tokens after {N_BLOCKS} loaded blocks of {BLOCK} tokens\n")
    print("| format | bytes/value | vs q8_0 | argmax agreement with f16 (mean / worst place) | mean max abs dlogit |")
    print("|---|---|---|---|---|")
    for name, (nbytes, _, _) in FORMATS.items():
        print(f"| {name} | {nbytes:.3f} | {nbytes / Q8_0_BYTES:.2f}x | {np.mean(agreement[name]):.3f} / "
              f"{np.min(agreement[name]):.3f} | {np.mean(max_diff[name]):.3f} |")


if __name__ == "__main__":
    main()
