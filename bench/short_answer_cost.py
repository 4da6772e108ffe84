"""What the short answer (engine/short_answer.py) costs the first token: kv mode with and without it, side by side.

Every held-out question is asked twice in kv mode on the same store, one right after the other, in alternating
order (free first on even questions, short first on odd ones) so that a change in the machine's load falls on both:
`free` (`--no-short`: the model's own words) and `short` (the likeliest evidence span first, scored in one batch of
parallel sequences). Printed: the first-token medians, their ratio (issue 14: at most 1.25x today's kv mode), the
spans scored per answer and how long the scoring took. The ratio is measured, not assumed: the scoring is one extra
decode of up to ~100 tokens before the first token.

    python bench/short_answer_cost.py [--only SET ...] [--out docs/short_answer_cost.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval import ask_once, load_average  # noqa: E402
from heldout import load_sets, stale_questions  # noqa: E402

from episodic_cli.engine.paths import cache_dir  # noqa: E402
from episodic_cli.engine.workspace import Workspace  # noqa: E402

ANSWER_MAX_TOKENS = 32  # the first token is what is timed; a short tail keeps the run short


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=Path, default=Path(__file__).resolve().parent / "heldout")
    ap.add_argument("--only", nargs="*", default=["book", "code", "pdf-manual", "pdf-spec"])
    ap.add_argument("--stores", type=Path, default=cache_dir() / "heldout", help="bench/heldout.py's stores")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("docs/short_answer_cost.json"))
    args = ap.parse_args(argv)
    rows = []
    load_start = load_average()
    n = 0
    for spec in load_sets(args.sets):
        if spec["set"] not in args.only:
            continue
        store_dir = args.stores / spec["set"]
        if not store_dir.exists():
            print(f"{spec['set']}: no store at {store_dir} (run bench/heldout.py first); skipped", flush=True)
            continue
        ws = Workspace(store=str(store_dir), threads=args.threads)
        store = ws.store_for_reading()
        try:
            ws.check_store(store)
            stale = set(stale_questions(store, spec["questions"]))
            for q in spec["questions"]:
                if q["qid"] in stale:
                    continue
                order = ("free", "short") if n % 2 == 0 else ("short", "free")
                n += 1
                row = {"qid": q["qid"]}
                for condition in order:
                    warnings: list[str] = []
                    result, r = ask_once(ws, store, q["question"], q["gold_text"], warnings,
                                         max_tokens=ANSWER_MAX_TOKENS, mode="kv", short=condition == "short")
                    row[condition] = r["first_token_s"]
                    if condition == "short":
                        row["lead"] = result.answer.short
                rows.append(row)
                print(f"  {q['qid']:<16} free {row['free']:.2f}s  short {row['short']:.2f}s  lead={row['lead']!r}",
                      flush=True)
        finally:
            store.close()
            ws.close()
    if not rows:
        print("no question asked")
        return 1
    free = statistics.median(r["free"] for r in rows)
    short = statistics.median(r["short"] for r in rows)
    led = [r for r in rows if r["lead"]]
    ratio_led = (statistics.median(r["short"] for r in led) / statistics.median(r["free"] for r in led)) if led else None
    summary = {"questions": len(rows), "led": len(led), "first_token_median_free_s": round(free, 3),
               "first_token_median_short_s": round(short, 3), "ratio_all": round(short / free, 3),
               "ratio_led_only": None if ratio_led is None else round(ratio_led, 3),
               "per_question_ratio_median": round(statistics.median(r["short"] / r["free"] for r in rows), 3),
               "load_start": load_start, "load_end": load_average(), "date": time.strftime("%Y-%m-%d %H:%M")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1), encoding="utf-8")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
