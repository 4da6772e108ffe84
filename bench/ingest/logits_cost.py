"""What the lm_head costs a prefill: the same tokens decoded with the last token's logits only, with every token's
(what surprise needs today), and with one token's in `--every` (what surprise at chosen places only would need).
Same model, threads and 2,048-token windows as bench/ingest/ingest_throughput.py, in one process and in turn, each round
alternating the order; the best round of each is kept (a shared machine only slows a run down) beside every round.

    python bench/ingest/logits_cost.py [--rounds 3] [--tokens 4096] [--every 10] [--model qwen-1.5b]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from episodic_cli.engine.llama.backend import INGEST_BATCH, LlamaSession
from episodic_cli.engine.workspace import Workspace
from ingest_throughput import WINDOW, haystack

HERE = Path(__file__).resolve().parent


def prefill_rate(ws: Workspace, tokens: np.ndarray, threads: int | None, every: int | None) -> float:
    """Tokens a second over `tokens` in 2,048-token windows, each from an empty cache; `every`: logits for one token
    in that many (None: the last token's only; 1: all)."""
    session = LlamaSession(ws.model, n_ctx=WINDOW, n_threads=threads, n_seq_max=1)
    session.warm_up()
    wanted = None
    if every is not None:
        wanted = np.zeros(INGEST_BATCH, dtype=np.int8)
        wanted[::every] = 1
    t0 = time.perf_counter()
    for a in range(0, len(tokens) - WINDOW + 1, WINDOW):
        session.clear()
        for b in range(a, a + WINDOW, INGEST_BATCH):
            session.decode(tokens[b : b + INGEST_BATCH], b - a, wanted)
    seconds = time.perf_counter() - t0
    session.close()
    return (len(tokens) // WINDOW * WINDOW) / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=2 * WINDOW)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--model", default="qwen-1.5b")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=HERE.parent / "results" / "logits_cost.json")
    args = ap.parse_args()
    ws = Workspace(model=args.model, store=str(Path(tempfile.mkdtemp(prefix="epi-logits-")) / "unused"))
    tokens = ws.model.tokenize(haystack(8 * args.tokens))[: args.tokens]
    variants = {"last token": None, "every token": 1, f"1 token in {args.every}": args.every}
    rounds = []
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        rates = {name: prefill_rate(ws, tokens, args.threads, variants[name]) for name in order}
        rounds.append({"load": round(os.getloadavg()[0], 2), **{k: round(v, 1) for k, v in rates.items()}})
        print(f"round {r + 1}: " + "  ".join(f"{k} {v:.1f} tok/s" for k, v in rates.items())
              + f"  (load {os.getloadavg()[0]:.2f})", flush=True)
    best = {k: max(r[k] for r in rounds) for k in variants}
    last = best["last token"]
    print("best: " + "  ".join(f"{k} {v:.1f} tok/s ({v / last:.3f} of the last token's)" for k, v in best.items()))
    args.out.write_text(json.dumps({"model": args.model, "tokens": len(tokens), "rounds": rounds, "best": best,
                                    "ratio_to_last": {k: round(v / last, 3) for k, v in best.items()}},
                                   indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
