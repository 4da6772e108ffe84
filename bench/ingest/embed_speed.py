#!/usr/bin/env python
"""Ingest's embedding step, before and after issue 35, side by side in one run: sentence-transformers (torch; what
ingest used before) against the numpy encoder (what it uses now), on the same windows, the same batch size (32),
the same thread count (each library's default: one thread per core).

The windows are bench/ingest/embedder_reference.py's 1,000 (half prose, half code, cut as ingest cuts events), or the first
--windows of them. Rounds alternate the two (ST, numpy, numpy, ST, ...) so that a change in the machine's load
falls on both; each is timed by wall clock and by this process's CPU seconds, and the load average is read before
and after, as the machine is shared. The ratio is sentence-transformers' time over numpy's (> 1: numpy is faster).

    pip install 'epi[st]'; python bench/ingest/embed_speed.py --out bench/results/embed_speed.json

Results: docs/benchmarks.md, "Embedding without torch".
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "ingest"))

from embedder_reference import reference_windows  # noqa: E402

from episodic_cli.engine.embed.embedder import Embedder, bundled_embedder_path  # noqa: E402


def timed(fn) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--windows", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2, help="timed runs of each (after one warm-up run of each)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    windows = reference_windows()[: args.windows]
    load_before = os.getloadavg()
    encoder = Embedder()._encoder
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(bundled_embedder_path()), device="cpu")

    def run_st():
        st.encode(windows, batch_size=32, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)

    def run_numpy():
        encoder.encode_batch(windows, batch_size=32)

    run_st(), run_numpy()  # warm-up: first-touch of the memory-mapped weights, torch's lazy set-up
    times: dict[str, list[tuple[float, float]]] = {"sentence_transformers": [], "numpy": []}
    for r in range(args.rounds):
        order = [("sentence_transformers", run_st), ("numpy", run_numpy)]
        for name, fn in order if r % 2 == 0 else order[::-1]:
            times[name].append(timed(fn))
            print(name, [round(x, 2) for x in times[name][-1]], flush=True)
    load_after = os.getloadavg()
    tokens = sum(len(encoder.token_ids(w)) for w in windows)
    med = {k: (statistics.median(t[0] for t in v), statistics.median(t[1] for t in v)) for k, v in times.items()}
    import sentence_transformers
    import torch

    result = {
        "windows": len(windows), "tokens": tokens, "batch_size": 32, "rounds": args.rounds,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)",
        "load_average_1_5_15": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in load_after]},
        "versions": {"sentence_transformers": sentence_transformers.__version__, "torch": torch.__version__,
                     "torch_threads": torch.get_num_threads(), "numpy": __import__("numpy").__version__},
        "wall_s": {k: [round(t[0], 3) for t in v] for k, v in times.items()},
        "cpu_s": {k: [round(t[1], 3) for t in v] for k, v in times.items()},
        "windows_per_s": {k: round(len(windows) / m[0], 1) for k, m in med.items()},
        "ratio_wall_st_over_numpy": round(med["sentence_transformers"][0] / med["numpy"][0], 3),
        "ratio_cpu_st_over_numpy": round(med["sentence_transformers"][1] / med["numpy"][1], 3),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
