#!/usr/bin/env python
"""Reference vectors for the numpy embedder (issue 35): 1,000 real windows embedded by sentence-transformers.

Run once, where sentence-transformers is installed (`pip install 'epi[st]'`); epi itself no longer uses it. The
windows are cut from this repository's own text the way ingest cuts an event for the embedder
(`embed.embedder._word_windows`: 160 words, stride 120): half prose (the Markdown files: README.md, docs/, bench/,
native/), half code (episodic_cli/, store/, bench/, tests/ .py files). Each file is split at blank lines into pieces of 20-400 words, as events vary
in size, and each piece into windows; 500 of each kind are drawn with a fixed seed.

Written: tests/data/embedder_reference.npz (windows, the vectors as float16, the versions that made them), which
tests/test_embedder_reference.py holds the numpy encoder to (cosine >= 0.9999). Prints the cosine of the numpy
encoder's vectors against these, min and mean (docs/benchmarks.md, "Embedding without torch").

    python bench/ingest/embedder_reference.py            # writes tests/data/embedder_reference.npz
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from episodic_cli.engine.embed.embedder import Embedder, _word_windows, bundled_embedder_path  # noqa: E402

OUT = ROOT / "tests" / "data" / "embedder_reference.npz"
N_PER_KIND = 500
SEED = 0


def pieces(path: Path, rng: np.random.Generator) -> list[str]:
    """The file's blank-line blocks, grouped into pieces of a random 20-400 words each."""
    blocks = [b for b in path.read_text(encoding="utf-8", errors="replace").split("\n\n") if b.strip()]
    out, cur, target = [], [], int(rng.integers(20, 401))
    for block in blocks:
        cur.append(block)
        if sum(len(b.split()) for b in cur) >= target:
            out.append("\n\n".join(cur))
            cur, target = [], int(rng.integers(20, 401))
    if cur:
        out.append("\n\n".join(cur))
    return out


def windows_of(files: list[Path], rng: np.random.Generator) -> list[str]:
    found = []
    for f in files:
        for piece in pieces(f, rng):
            found.extend(_word_windows(piece))
    picked = rng.choice(len(found), size=N_PER_KIND, replace=False)
    return [found[i] for i in sorted(picked)]


def reference_windows() -> list[str]:
    rng = np.random.default_rng(SEED)
    prose = [ROOT / "README.md", *sorted(p for d in ("docs", "bench", "native") for p in (ROOT / d).rglob("*.md"))]
    code = sorted(p for d in ("episodic_cli", "store", "bench", "tests") for p in (ROOT / d).rglob("*.py"))
    return windows_of(prose, rng) + windows_of(code, rng)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    windows = reference_windows()
    model = SentenceTransformer(str(bundled_embedder_path()), device="cpu")
    t = time.perf_counter()
    ref = model.encode(windows, batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                       show_progress_bar=False)
    st_s = time.perf_counter() - t
    meta = {"sentence_transformers": sentence_transformers.__version__, "torch": torch.__version__,
            "windows": len(windows), "seed": SEED, "made_by": "bench/ingest/embedder_reference.py"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, windows=np.array(windows), vectors=ref.astype(np.float16),
                        meta=np.array(json.dumps(meta)))
    t = time.perf_counter()
    got = Embedder()._encoder.encode_batch(windows)
    np_s = time.perf_counter() - t
    stored = np.load(args.out)["vectors"].astype(np.float32)
    cos = np.sum(got * stored, axis=1) / np.linalg.norm(stored, axis=1)
    cos_exact = np.sum(got * ref, axis=1)
    print(json.dumps({**meta, "bytes": args.out.stat().st_size,
                      "cosine_vs_stored_float16": {"min": float(cos.min()), "mean": float(cos.mean())},
                      "cosine_vs_float32": {"min": float(cos_exact.min()), "mean": float(cos_exact.mean())},
                      "tokens_max": int(max(len(Embedder()._encoder.token_ids(w)) for w in windows)),
                      "seconds": {"sentence_transformers": round(st_s, 2), "numpy": round(np_s, 2)}}, indent=1))


if __name__ == "__main__":
    main()
