"""What relinking loaded blocks' first tokens (EPIC; engine/answer/kv_mode.py) costs the first token, side by side.

Every held-out question of the chosen sets is asked in kv mode with its blocks present (a store whose blocks a
bench/heldout.py run kept), once per relink setting, one right after the other, the order rotating from question to
question so that a change in the machine's load falls on all of them. The answer context is emptied before each
ask, so every block is loaded (and relinked) again. Printed: first-token and assembly (prefill_s) medians per
setting, their ratio to no relinking, and the tokens relinked per question.

    python bench/relink_cost.py --stores DIR [--only SET ...] [--relink 0 4 16] [--model qwen-1.5b]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval import BENCH_OPTIONS, ask_once, load_average  # noqa: E402
from heldout import stored_questions  # noqa: E402

from episodic_cli.engine.llama.models import answer_model  # noqa: E402

ANSWER_MAX_TOKENS = 8  # the first token is what is timed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=Path, default=Path(__file__).resolve().parent / "heldout")
    ap.add_argument("--only", nargs="*", default=["epub-rustbook", "html-valgrind"])
    ap.add_argument("--stores", type=Path, required=True, help="bench/heldout.py's stores, blocks kept")
    ap.add_argument("--relink", type=int, nargs="+", default=[0, 4, 16])
    ap.add_argument("--model", default=None, help="answer model (default: epi ask's)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/results/relink_cost.json"))
    args = ap.parse_args(argv)
    settings = list(args.relink)
    rows = []
    load_start = load_average()
    for ws, store, q in stored_questions(args.sets, args.only, args.stores, answer_model(args.model), args.threads):
        answerer = ws.answerer("kv", store)
        shift = len(rows) % len(settings)
        row = {"qid": q["qid"]}
        for n in settings[shift:] + settings[:shift]:
            answerer.relink_tokens = n
            answerer.reset()
            result, r = ask_once(ws, store, q["question"], q["gold_text"], [],
                                 replace(BENCH_OPTIONS, mode="kv", k=5), max_tokens=ANSWER_MAX_TOKENS)
            a = result.answer
            row[str(n)] = {"first_token_s": r["first_token_s"], "prefill_s": r["prefill_s"],
                           "loaded": a.kv_loaded_tokens, "prefilled": a.kv_prefilled_tokens,
                           "relinked": a.kv_relinked_tokens}
        rows.append(row)
        print(f"  {q['qid']:<16} " + "  ".join(
            f"relink {n}: {row[str(n)]['first_token_s']:.2f}s ({row[str(n)]['relinked']} tok)"
            for n in settings), flush=True)
    if not rows:
        print("no question asked")
        return 1
    hot = [r for r in rows if all(r[str(n)]["prefilled"] == 0 for n in settings)]  # every block loaded
    base = str(settings[0])
    med = {str(n): {k: statistics.median(r[str(n)][k] for r in hot) for k in ("first_token_s", "prefill_s",
                                                                               "relinked")} for n in settings}
    summary = {"questions": len(rows), "all_blocks_loaded": len(hot), "median": med,
               "first_token_ratio_to_" + base: {str(n): round(med[str(n)]["first_token_s"]
                                                              / med[base]["first_token_s"], 3) for n in settings[1:]},
               "load_start": load_start, "load_end": load_average(), "date": time.strftime("%Y-%m-%d %H:%M")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1), encoding="utf-8")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
