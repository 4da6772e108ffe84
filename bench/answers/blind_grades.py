"""Blind grading of answers written under several conditions (bench/answers/whole_heldout.py's result files): `sheet`
writes each question with its rubric and its distinct answers under shuffled letters, for a grader who does not
know which condition wrote which; `resolve` maps the grader's letters back to the conditions. Answers that are the
same text under two conditions are graded once.

    python bench/answers/blind_grades.py sheet --results before=A.json after=B.json --sets DIR... --out SHEET --key KEY
    python bench/answers/blind_grades.py resolve --grades GRADED.json --key KEY --out GRADES.json
"""
from __future__ import annotations

import argparse
import json
import random
import string
import sys
from pathlib import Path


def sheet(args) -> int:
    documents = {}
    for folder in args.sets:
        for path in sorted(folder.glob("*.json")):
            qset = json.loads(path.read_text())
            documents[qset["set"]] = qset["documents"]
    answers: dict[str, dict] = {}
    for spec in args.results:
        condition, file = spec.split("=", 1)
        for row in json.loads(Path(file).read_text())["rows"]:
            entry = answers.setdefault(row["qid"], {"row": row, "by": {}})
            entry["by"][condition] = row["answer"]
    rng = random.Random(args.seed)
    items, key = [], {}
    for qid, entry in sorted(answers.items()):
        texts = sorted(set(entry["by"].values()))
        rng.shuffle(texts)
        letters = dict(zip(string.ascii_uppercase, texts))
        key[qid] = {letter: [c for c, t in entry["by"].items() if t == text] for letter, text in letters.items()}
        row = entry["row"]
        items.append({"qid": qid, "question": row["question"], "rubric": row["rubric"], "where": row.get("where"),
                      "documents": documents.get(row["set"]), "answers": letters,
                      "grade": {letter: {"grade": None, "why": None} for letter in letters}})
    args.out.write_text(json.dumps({"instructions": "For each answer letter set grade to right, partial or wrong by "
                                    "the rubric (right: every must item stated, no must_not claim; partial: some of "
                                    "must, no must_not claim; else wrong), checking facts in the documents; why: one "
                                    "short sentence.", "items": items}, indent=1, ensure_ascii=False) + "\n")
    args.key.write_text(json.dumps(key, indent=1) + "\n")
    print(f"{len(items)} questions, {sum(len(i['answers']) for i in items)} distinct answers -> {args.out}")
    return 0


def resolve(args) -> int:
    graded = json.loads(args.grades.read_text())
    key = json.loads(args.key.read_text())
    rows = []
    for item in graded["items"]:
        row = {"qid": item["qid"], "question": item["question"]}
        for letter, grade in item["grade"].items():
            for condition in key[item["qid"]][letter]:
                row[condition] = grade["grade"]
                row[f"{condition}_why"] = grade["why"]
        rows.append(row)
    conditions = sorted({c for v in key.values() for cs in v.values() for c in cs})
    totals = {c: {g: sum(r.get(c) == g for r in rows) for g in ("right", "partial", "wrong")} for c in conditions}
    args.out.write_text(json.dumps({"totals": totals, "rows": rows}, indent=1, ensure_ascii=False) + "\n")
    for c, t in totals.items():
        print(f"{c:<16} right {t['right']:>3}  partial {t['partial']:>3}  wrong {t['wrong']:>3}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sheet")
    s.add_argument("--results", nargs="+", required=True, help="CONDITION=FILE, a whole_heldout.py result each")
    s.add_argument("--sets", type=Path, nargs="+", required=True)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--key", type=Path, required=True)
    s.add_argument("--seed", type=int, default=53)
    r = sub.add_parser("resolve")
    r.add_argument("--grades", type=Path, required=True)
    r.add_argument("--key", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    return sheet(args) if args.command == "sheet" else resolve(args)


if __name__ == "__main__":
    sys.exit(main())
