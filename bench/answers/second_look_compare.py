"""Both ways of a `bench/answers/heldout.py --second-look on` run, side by side: each row keeps the answer the second look set
aside (`first_answer`, scored as `first_contains`), so one run gives the answers without it and with it.

    python bench/answers/second_look_compare.py bench/results/second-look/heldout-s55-unseen-look2.json [...]

Prints, per set, the questions right without / with it; each question it touched, with both answers; and the
seconds it added to those questions (from where the first answer ended to where the second did).
"""
from __future__ import annotations

import json
import statistics
import sys


def compare(path: str) -> tuple[int, int, int]:
    run = json.load(open(path, encoding="utf-8"))
    print(f"== {path}")
    total_off = total_on = n = 0
    added = []
    for s in run["sets"]:
        gold = {q["qid"]: q["answer"] for q in s["questions"]}
        off = on = 0
        for r in s["rows"]:
            looked = r.get("first_answer") is not None
            before = r["first_contains"] if looked else r["contains"]
            off, on, n = off + before, on + r["contains"], n + 1
            if looked:
                mark = "+" if r["contains"] > before else "-" if r["contains"] < before else "="
                print(f"  {mark} {r['qid']} (gold {gold[r['qid']]!r})\n      first: {r['first_answer'][:140]!r}"
                      f"\n      again: {r['answer'][:140]!r}")
                if "first_done_s" in r:
                    added.append(r["second_look_done_s"] - r["first_done_s"])
        print(f"  {s['set']}: {off:.0f} without, {on:.0f} with, of {len(s['rows'])}")
        total_off, total_on = total_off + off, total_on + on
    looked = sum(r.get("first_answer") is not None for s in run["sets"] for r in s["rows"])
    print(f"  all: {total_off:.0f} without, {total_on:.0f} with, of {n}; looked again at {looked}")
    if added:
        print(f"  seconds added where it looked again: median {statistics.median(added):.1f}, "
              f"longest {max(added):.1f} (load {run['load_start'][0]}-{run['load_end'][0]})")
    return int(total_off), int(total_on), n


if __name__ == "__main__":
    for p in sys.argv[1:]:
        compare(p)
