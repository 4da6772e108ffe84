"""What the third retrieval channel (engine/retrieval/passage_rank.py) costs a question, side by side.

Every scorable question of the named sets is retrieved as `epi ask` retrieves it (Workspace.retrieve: scope,
embedding, k=5, +-1 neighbour), with the best-sentence ranking off and on, one right after the other, the order
alternating from question to question so that a change in the machine's load falls on both. The question's
embedding is computed once and reused, so only retrieval is timed. Printed: each way's median, the median of the
per-question differences, and the ratio of the medians.

    python bench/passage_rank_cost.py --stores DIR --only SET ... [--rounds 3] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from heldout import stored_questions  # noqa: E402

from episodic_cli.engine import workspace  # noqa: E402


def timed_retrieve(ws, store, question: str, on: bool) -> float:
    workspace.PASSAGE_RANKING = on
    t = time.perf_counter()
    ws.retrieve(store, question, 5)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", type=Path, default=Path(__file__).resolve().parent / "heldout")
    ap.add_argument("--stores", type=Path, required=True)
    ap.add_argument("--only", nargs="+", required=True)
    ap.add_argument("--rounds", type=int, default=3, help="timed pairs per question (after one untimed pair)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    load_before = os.getloadavg()
    off, on, diff = [], [], []
    for n, (ws, store, q) in enumerate(stored_questions(args.sets, args.only, args.stores, None, None)):
        question = q["question"]
        cached = ws.embedder.embed_query  # the embedding is not what is timed: computed once, then reused
        vectors: dict[str, object] = {}
        ws.embedder.embed_query = lambda text: vectors.setdefault(text, cached(text))  # noqa: E731
        try:
            timed_retrieve(ws, store, question, False), timed_retrieve(ws, store, question, True)
            for r in range(args.rounds):
                if (n + r) % 2 == 0:
                    t_off = timed_retrieve(ws, store, question, False)
                    t_on = timed_retrieve(ws, store, question, True)
                else:
                    t_on = timed_retrieve(ws, store, question, True)
                    t_off = timed_retrieve(ws, store, question, False)
                off.append(t_off), on.append(t_on), diff.append(t_on - t_off)
        finally:
            ws.embedder.embed_query = cached
    result = {
        "sets": args.only, "timed_pairs": len(off), "load_before": load_before, "load_after": os.getloadavg(),
        "off_median_ms": 1000 * statistics.median(off), "on_median_ms": 1000 * statistics.median(on),
        "added_median_ms": 1000 * statistics.median(diff),
        "ratio_of_medians": statistics.median(on) / statistics.median(off),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
