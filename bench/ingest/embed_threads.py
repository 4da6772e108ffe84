"""The embedder's BLAS on one thread against numpy's default (a thread per core), side by side in one process.

(a) The embedding step alone: windows of real text (a novel's prose and Python code from the big archive, or
CPython's pydoc topics where it is absent), cut as ingest cuts them, embedded with each setting in alternating
rounds; pieces per second and the largest difference between the two settings' vectors.
(b) A whole ingest of the same prose into fresh stores with the fast reader, the setting alternating by round:
tokens per second of the whole ingest, and of its embedding stage (IngestResult.stage_seconds).

The load average before and after is printed: on a 2-core machine the ratio depends on what else runs.

    python bench/ingest/embed_threads.py [--rounds 3] [--chars 40000] [--archive /work/archive-1m]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest_throughput import haystack  # noqa: E402 - the benchmarks' real prose

from episodic_cli.engine.documents.sources import discover  # noqa: E402
from episodic_cli.engine.embed import query_encoder  # noqa: E402
from episodic_cli.engine.ingest.segment import SegmentParams  # noqa: E402
from episodic_cli.engine.kv.keeper import DEFAULT_KIND  # noqa: E402
from episodic_cli.engine.llama.models import reader_model  # noqa: E402
from episodic_cli.engine.workspace import Workspace  # noqa: E402

SETTINGS = {"one thread": 1, "numpy's default": None}  # None: threadpoolctl leaves BLAS as it is


def texts_to_embed(archive: Path, words_per_event: int = 180, n: int = 64) -> dict[str, list[str]]:
    """Event-sized texts: prose and code, from the archive where it is built, else the pydoc topics."""
    novel, code = archive / "novels" / "austen" / "emma.txt", archive / "code" / "tenacity-9.2.1"
    prose = novel.read_text(encoding="utf-8") if novel.exists() else haystack(200_000)
    source = ("\n".join(p.read_text(encoding="utf-8") for p in sorted(code.rglob("*.py"))) if code.exists()
              else haystack(200_000))
    out = {}
    for name, text in (("prose", prose), ("code", source)):
        words = text.split()
        out[name] = [" ".join(words[i : i + words_per_event]) for i in range(0, words_per_event * n, words_per_event)]
    return out


def embedding_step(ws: Workspace, texts: dict[str, list[str]], rounds: int) -> dict:
    encoder = ws.embedder._encoder
    out = {}
    for kind, batch in texts.items():
        ids = [w for windows in ws.embedder._windows_of(batch) for w in windows]
        pieces = sum(map(len, ids))
        rates: dict[str, list[float]] = {name: [] for name in SETTINGS}
        vectors = {}
        for r in range(rounds):
            for name in (list(SETTINGS) if r % 2 == 0 else list(SETTINGS)[::-1]):
                query_encoder.BLAS_THREADS = SETTINGS[name]
                started = time.perf_counter()
                vectors[name] = encoder.encode_ids_batch(ids)
                rates[name].append(pieces / (time.perf_counter() - started))
        a, b = vectors.values()
        out[kind] = {"windows": len(ids), "pieces": pieces, "pieces_per_s": rates,
                     "max_abs_diff": float(np.abs(a - b).max())}
        print(f"embedding {kind}: " + ", ".join(f"{n} {max(v):,.0f} pieces/s" for n, v in rates.items()), flush=True)
    return out


def whole_ingest(reader: str, doc: Path, tmp: Path, rounds: int) -> dict:
    base = Workspace(reader, store=str(tmp / "unused"))
    base.embedder.embed_texts(["warm up"])
    rates: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    for r in range(rounds):
        for name in (list(SETTINGS) if r % 2 == 0 else list(SETTINGS)[::-1]):
            query_encoder.BLAS_THREADS = SETTINGS[name]
            ws = Workspace(reader, store=str(tmp / f"store-{r}-{SETTINGS[name]}"))
            ws.__dict__.update(model=base.model, embedder=base.embedder)
            params = SegmentParams()
            st = ws.store_for_writing(params)
            ingestor = ws.ingestor(st, params, DEFAULT_KIND)  # the reader's blocks kept, as --answer-model none
            with st.writer():
                (result,) = list(ingestor.ingest(discover([doc])))
            ingestor.close()
            st.close()
            rates[name].append({"tokens_per_s": result.tokens_per_s, "stage_seconds": result.stage_seconds,
                                "tokens": result.tokens})
            print(f"ingest, {name}: {result.tokens_per_s:.1f} tokens/s, embedding "
                  f"{result.stage_seconds['embed']:.1f} s of {result.seconds:.1f}", flush=True)
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chars", type=int, default=40_000, help="prose for the whole ingest (~9.6k tokens)")
    ap.add_argument("--archive", type=Path, default=Path("/work/archive-1m"))
    ap.add_argument("--out", type=Path, default=Path("bench/results/embed_threads.json"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="epi-embed-threads-"))
    doc = tmp / "topics.txt"
    doc.write_text(haystack(args.chars))
    reader = reader_model(None)
    load_before = os.getloadavg()
    step = embedding_step(Workspace(reader, store=str(tmp / "unused")), texts_to_embed(args.archive), args.rounds)
    ingest = whole_ingest(reader, doc, tmp, args.rounds)
    load_after = os.getloadavg()
    best = {name: max(r["tokens_per_s"] for r in runs) for name, runs in ingest.items()}
    one, default = (best[name] for name in SETTINGS)
    ratio = one / default
    print(f"\nwhole ingest, best of {args.rounds}: one thread {one:.1f}, numpy's default {default:.1f} tokens/s: "
          f"{ratio:.2f}x (load {load_before[0]:.1f} -> {load_after[0]:.1f})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(),
                                    "embedding_step": step, "whole_ingest": ingest, "best_tokens_per_s": best,
                                    "ratio_one_thread_over_default": round(ratio, 3),
                                    "load_before": load_before, "load_after": load_after}, indent=1))


if __name__ == "__main__":
    main()
