"""Which form of the bundled model to run: prefill speed and fidelity of Q4_1 (as shipped), F16, Q8_0 and Q4_0,
measured side by side in one run. Fidelity is against the shipped Q4_1 weights: argmax agreement of the next-token
prediction at every position of a real text, and the max absolute logit difference.

    python bench/models/model_forms.py [--tokens 1024] [--threads N]
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import tempfile
import time
from pathlib import Path

import llama_cpp as L
import numpy as np

from episodic_cli.engine.llama.backend import LlamaModel, LlamaSession, quiet_llama_logs
from episodic_cli.engine.llama.models import bundled_model_path

FORMS = {"q4_1 (shipped)": None, "f16": L.LLAMA_FTYPE_MOSTLY_F16, "q8_0": 7, "q4_0": 2}


def convert(src: Path, ftype: int, dst: Path) -> Path:
    params = L.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    if L.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params)) != 0:
        raise SystemExit(f"conversion to {dst.name} failed")
    return dst


def sample_text() -> str:
    # Real prose: the EM-LLM paper in the shared seeds if present, else this repository's README.
    seeds = sorted(Path(__file__).resolve().parents[3].glob("shared/seeds/001_*.txt"))
    path = seeds[0] if seeds else Path(__file__).resolve().parents[2] / "README.md"
    return path.read_text()[:40000]


def measure(path: Path, tokens: np.ndarray, threads: int | None) -> tuple[float, np.ndarray]:
    model = LlamaModel(path)
    session = LlamaSession(model, n_ctx=2048, n_threads=threads, n_seq_max=1)
    session.prefill(tokens[:64])  # warm-up
    best = float("inf")
    for _ in range(2):
        session.clear()
        t0 = time.perf_counter()
        session.prefill(tokens)
        best = min(best, time.perf_counter() - t0)
    # Next-token logits at every position (for fidelity), in batches.
    session.clear()
    rows = []
    for a in range(0, len(tokens), 512):
        chunk = tokens[a : a + 512]
        session.decode(chunk, a, np.ones(len(chunk), dtype=np.int8))
        ptr = L.llama_get_logits(session.ctx)
        rows.append(np.ctypeslib.as_array(ptr, shape=(len(chunk), model.info.n_vocab)).copy())
    session.close()
    model.close()
    return len(tokens) / best, np.concatenate(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    quiet_llama_logs()
    src = bundled_model_path()
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: src if ft is None else convert(src, ft, Path(tmp) / f"{name}.gguf") for name, ft in FORMS.items()}
        tokens = LlamaModel(src).tokenize(sample_text())[: args.tokens]
        results = {name: measure(p, tokens, args.threads) for name, p in paths.items()}
    base_speed, base_logits = results["q4_1 (shipped)"]
    base_top = base_logits.argmax(axis=1)
    print(f"| form | prefill tok/s ({len(tokens)} tokens) | speed vs shipped | argmax agreement vs shipped | max abs logit diff |")
    print("|---|---|---|---|---|")
    for name, (speed, logits) in results.items():
        agree = float((logits.argmax(axis=1) == base_top).mean())
        diff = float(np.abs(logits - base_logits).max())
        print(f"| {name} | {speed:.0f} | {speed / base_speed:.2f}x | {agree:.4f} | {diff:.3f} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
