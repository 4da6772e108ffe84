"""The first token in kv mode under answer settings side by side: the defaults before this change against after.

Every held-out question is asked once in each condition on the same store, one right after the other, the order
rotating from question to question so that a change in the machine's load falls on all of them:
- `k3-free`  kv mode as it was: k=3 hits, the model's own words (`--no-short`);
- `k3-short` k=3, the answer led by the likeliest evidence span (engine/answer/short_answer.py: one extra batch decode of
             up to 16 spans before the first token);
- `k5-short` k=5 (today's default), led by a span.
Printed: the first-token medians, each condition's ratio to `k3-free` (issue 14: at most 1.25x), and the median of
the per-question ratios.

    python bench/latency/first_token_ab.py [--only SET ...] [--out bench/results/first_token_ab.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "answers"))
from eval import BENCH_OPTIONS, ask_once, load_average  # noqa: E402
from heldout import stored_questions  # noqa: E402

from episodic_cli.engine.paths import cache_dir  # noqa: E402

ANSWER_MAX_TOKENS = 32  # the first token is what is timed; a short tail keeps the run short
CONDITIONS = {"k3-free": {"k": 3, "short": False}, "k3-short": {"k": 3, "short": True},
              "k5-short": {"k": 5, "short": True}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=Path, default=Path(__file__).resolve().parents[1] / "heldout")
    ap.add_argument("--only", nargs="*", default=["book", "code", "pdf-manual", "pdf-spec"])
    ap.add_argument("--stores", type=Path, default=cache_dir() / "heldout", help="bench/answers/heldout.py's stores")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/results/first_token_ab.json"))
    args = ap.parse_args(argv)
    names = list(CONDITIONS)
    rows = []
    load_start = load_average()
    for ws, store, q in stored_questions(args.sets, args.only, args.stores, None, args.threads):
        shift = len(rows) % len(names)
        row = {"qid": q["qid"]}
        for name in names[shift:] + names[:shift]:
            result, r = ask_once(ws, store, q["question"], q["gold_text"], [],
                                 replace(BENCH_OPTIONS, mode="kv", **CONDITIONS[name]), max_tokens=ANSWER_MAX_TOKENS)
            row[name] = r["first_token_s"]
        rows.append(row)
        print(f"  {q['qid']:<16} " + "  ".join(f"{n} {row[n]:.2f}s" for n in names), flush=True)
    if not rows:
        print("no question asked")
        return 1
    medians = {n: statistics.median(r[n] for r in rows) for n in names}
    base = names[0]
    summary = {"questions": len(rows), "first_token_median_s": {n: round(v, 3) for n, v in medians.items()},
               "ratio_to_" + base: {n: round(medians[n] / medians[base], 3) for n in names[1:]},
               "per_question_ratio_median": {n: round(statistics.median(r[n] / r[base] for r in rows), 3)
                                             for n in names[1:]},
               "load_start": load_start, "load_end": load_average(), "date": time.strftime("%Y-%m-%d %H:%M")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1), encoding="utf-8")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
