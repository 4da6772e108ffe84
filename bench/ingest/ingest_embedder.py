"""Whole ingest with the numpy embedder against sentence-transformers' (what ingest used before issue 35), side by
side in one process: the same text, the same reading model, fresh stores, rounds alternating the two so that a
change in the machine's load falls on both. bench/ingest/embed_speed.py times the embedding step alone; this is what a user
waits for.

    pip install 'epi[st]'; python bench/ingest/ingest_embedder.py [--chars 40000] [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from ingest_throughput import haystack, ingest_rate

from episodic_cli.engine.embed.embedder import bundled_embedder_path
from episodic_cli.engine.llama.models import reader_model
from episodic_cli.engine.workspace import Workspace


class SentenceTransformersEncoder:
    """encode_batch as ingest calls it, by sentence-transformers (torch)."""

    def __init__(self):
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(bundled_embedder_path()), device="cpu")

    def encode_batch(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        return self.model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                                 show_progress_bar=False).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chars", type=int, default=40_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("bench/results/ingest_embedder.json"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="epi-ingest-embedder-"))
    doc = tmp / "topics.txt"
    doc.write_text(haystack(args.chars))
    reader = reader_model(None)  # the fast reader (SmolLM2 unless $EPI_MODEL names another)
    base = Workspace(reader, store=str(tmp / "unused"))
    numpy_encoder = base.embedder._encoder
    st_encoder = SentenceTransformersEncoder()
    for encoder in (numpy_encoder, st_encoder):  # warm both: first touch of the weights, torch's lazy set-up
        encoder.encode_batch(["warm up"] * 4)
    load_before = os.getloadavg()
    rates: dict[str, list[float]] = {"numpy": [], "sentence-transformers": []}
    order = [name for r in range(args.rounds) for name in (("numpy", "sentence-transformers") if r % 2 == 0 else
                                                            ("sentence-transformers", "numpy"))]
    for i, name in enumerate(order):
        base.embedder.__dict__["_encoder"] = numpy_encoder if name == "numpy" else st_encoder
        ws = Workspace(reader, store=str(tmp / f"store-{i}"))
        ws.__dict__.update(model=base.model, embedder=base.embedder)
        rate, _, events = ingest_rate(ws, doc, "q8_0")
        rates[name].append(rate)
        print(f"{name}: {rate:.1f} tokens/s ({events} events)", flush=True)
    best = {name: max(values) for name, values in rates.items()}
    ratio = best["numpy"] / best["sentence-transformers"]
    load_after = os.getloadavg()
    print(f"\nbest of {args.rounds}: numpy {best['numpy']:.1f}, sentence-transformers {best['sentence-transformers']:.1f}"
          f" tokens/s: numpy at {ratio:.3f}x (load {load_before[0]:.1f} -> {load_after[0]:.1f})")
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), "chars": args.chars,
                                    "reader": base.model.info.name,
                                    "rounds": rates, "best": best, "ratio_numpy_over_st": round(ratio, 3),
                                    "load_before": load_before, "load_after": load_after}, indent=1))


if __name__ == "__main__":
    main()
