"""How the question-kind rule (engine/retrieval/question_kind.py) routes the held-out questions: the whole-scope sets
(bench/heldout/whole/, written blind after the rule was fixed) by the kind their writer gave each question, and the
lookup sets (bench/heldout/*.json), which must all stay lookups. No model runs: this is the rule alone.

    python bench/retrieval/question_kinds.py [--sets bench/heldout/whole2] [--out bench/results/question_kinds.json]
"""
from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from episodic_cli.engine.retrieval.question_kind import classify

HERE = Path(__file__).resolve().parent
# What each kind of held-out question should be read as: a named part whole, the map, an explanation read around
# its best passages; a follow-up is routed by its standalone form.
WANTED = {"summary": {"whole", "overview"}, "who-did-what": {"whole", "overview"}, "overview": {"overview"},
          "explanation": {"whole", "explain"}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=Path, default=HERE.parent / "heldout" / "whole", help="the whole-scope sets' folder")
    ap.add_argument("--out", type=Path, default=None,
                    help="default: bench/results/question_kinds.json (question_kinds-<folder>.json for other sets)")
    args = ap.parse_args(argv)
    default_sets = args.sets.resolve() == (HERE.parent / "heldout" / "whole").resolve()
    out = args.out or HERE.parent / "results" / ("question_kinds.json" if default_sets else
                                          f"question_kinds-{args.sets.name}.json")
    table: dict[str, Counter] = defaultdict(Counter)
    rows = []
    for path in sorted(args.sets.glob("*.json")):
        for q in json.loads(path.read_text())["questions"]:
            asked = q.get("standalone") or q["question"] if q["kind"] == "follow-up" else q["question"]
            got = classify(asked).value
            table[q["kind"]][got] += 1
            rows.append({"qid": q["qid"], "kind": q["kind"], "routed": got, "question": asked})
    lookups = [q["question"] for p in HERE.parent.glob("heldout/*.json") for q in json.loads(p.read_text())["questions"]]
    table["lookup sets"].update(classify(q).value for q in lookups)
    print(f"{'kind':<14} {'n':>3}  " + "  ".join(f"{k:>8}" for k in ("lookup", "whole", "explain", "overview")))
    for kind, counts in table.items():
        print(f"{kind:<14} {sum(counts.values()):>3}  " + "  ".join(f"{counts[k]:>8}" for k in
                                                                     ("lookup", "whole", "explain", "overview")))
    scored = [r for r in rows if r["kind"] in WANTED]
    right = sum(r["routed"] in WANTED[r["kind"]] for r in scored)
    print(f"routed as wanted: {right} of {len(scored)} whole-scope questions (follow-ups left out); lookups kept: "
          f"{table['lookup sets']['lookup']} of {len(lookups)}")
    out.write_text(json.dumps({"table": {k: dict(v) for k, v in table.items()}, "right": right,
                               "scored": len(scored), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
