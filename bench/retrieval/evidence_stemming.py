"""The narrowed evidence with the light suffix strip against English Snowball stemming, side by side, held-out sets.

`engine/retrieval/evidence.py` picks the sentences a narrowed answer reads (the 2 that share most weighted words with
the question) and the quotes that support an answer; its `stem()` decides which words meet. Until issue 35 it
stripped -ing/-ed/-es/-s from words over four letters ("class" became "clas", "classes" "class"; "use", "used" and
"uses" never met); now it is the Snowball English stemmer. Retrieval does not stem, so source recall cannot change:
what can is whether the gold excerpt and the gold answer are among the chosen sentences. Both stemmers run on the
same retrieved events of every question (k=5, +-1 neighbour), in one run, on the stores a `python bench/answers/heldout.py
--retrieval --stores DIR` run left.

    python bench/retrieval/evidence_stemming.py --stores DIR [--only SET ...] [--out bench/results/evidence-stemming.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "answers"))
from eval import covers, load_average, score_answer  # noqa: E402
from heldout import K, load_sets, stale_questions  # noqa: E402

from episodic_cli.engine.llama.models import reader_model  # noqa: E402
from episodic_cli.engine.retrieval import evidence  # noqa: E402
from episodic_cli.engine.workspace import Workspace  # noqa: E402


def light_stem(word: str) -> str:
    """evidence.stem() as it was before issue 35, kept here as what the Snowball stemmer is measured against."""
    if len(word) <= 4 or not word.isalpha():
        return word
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


STEMMERS = {"light": light_stem, "snowball": evidence.stem}


def chosen_text(question: str, retrieved: list, stemmer) -> str:
    original = evidence.stem
    evidence.stem = stemmer
    try:
        focus = evidence.narrow(question, retrieved)
    finally:
        evidence.stem = original
    return " ".join(retrieved[i].event.text[a:b] for i, spans in focus for a, b in spans)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=Path, default=Path(__file__).resolve().parents[1] / "heldout")
    ap.add_argument("--stores", type=Path, required=True)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--out", type=Path, default=Path("bench/results/evidence-stemming.json"))
    args = ap.parse_args()
    load_start = load_average()
    results, totals = [], {f"{name}_{what}": 0 for name in STEMMERS for what in ("excerpt", "answer")}
    totals["questions"] = 0
    for spec in load_sets(args.sets):
        if (args.only and spec["set"] not in args.only) or not (args.stores / spec["set"]).exists():
            continue
        ws = Workspace(reader_model(), store=str(args.stores / spec["set"]))
        store = ws.store_for_reading()
        try:
            ws.check_store(store)
            stale = set(stale_questions(store, spec["questions"]))
            rows = []
            for q in spec["questions"]:
                if q["qid"] in stale:
                    continue
                retrieved = ws.retrieve(store, q["question"], K, 1)
                row = {"qid": q["qid"]}
                for name, stemmer in STEMMERS.items():
                    text = chosen_text(q["question"], retrieved, stemmer)
                    row[f"{name}_excerpt"] = bool(covers([text], q["gold_text"]))
                    row[f"{name}_answer"] = bool(score_answer(text, q["answer"])["contains"])
                rows.append(row)
        finally:
            store.close()
            ws.close()
        counts = {key: sum(r[key] for r in rows) for key in totals if key != "questions"}
        counts["questions"] = len(rows)
        for key in totals:
            totals[key] += counts[key]
        differ = [r["qid"] for r in rows if any(r[f"light_{w}"] != r[f"snowball_{w}"] for w in ("excerpt", "answer"))]
        results.append({"set": spec["set"], **counts, "differ": differ, "rows": rows})
        print(f"{spec['set']:<16} n={counts['questions']:>2} excerpt chosen light {counts['light_excerpt']:>2} snowball "
              f"{counts['snowball_excerpt']:>2} | answer in the chosen light {counts['light_answer']:>2} snowball "
              f"{counts['snowball_answer']:>2} | differ: {', '.join(differ) or 'none'}", flush=True)
    print(f"{'total':<16} n={totals['questions']} excerpt chosen light {totals['light_excerpt']} snowball "
          f"{totals['snowball_excerpt']} | answer in the chosen light {totals['light_answer']} snowball "
          f"{totals['snowball_answer']} (load {load_start} -> {load_average()})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "command": " ".join(sys.argv),
                                    "totals": totals, "sets": results}, indent=1), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
