"""How questions that name a document or package as a whole are routed (engine/retrieval/named_whole.py), against
each set's own store: the subject the rule reads, the whole it names there, and the kind of answer it gets. No model.
Run it with PYTHONPATH set to another checkout to see that checkout's routing (where named_whole.py does not exist
yet, only question_kind.py's classify).

    python bench/retrieval/named_routing.py --sets bench/heldout/named --stores DIR [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from episodic_cli.engine.retrieval.question_kind import classify
from episodic_cli.engine.retrieval.scope import parse, resolve
from episodic_cli.store import Store

try:
    from episodic_cli.engine.retrieval.named_whole import named_whole, subject
except ImportError:  # a checkout before the rule
    named_whole = subject = None


def route(st: Store, question: str) -> dict:
    parsed = parse(question)
    scope = resolve(st, parsed)
    named = None
    if named_whole is not None and not (parsed.structural or scope.titled):
        named = named_whole(st, question)
    return {"subject": subject(question) if subject else None,
            "named": None if named is None else named.name,
            "kind": "overview" if named is not None else classify(question, parsed, scope.titled).value}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=Path, nargs="+", required=True)
    ap.add_argument("--stores", type=Path, required=True, help="a folder holding a store named after each set")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = []
    for folder in args.sets:
        for path in sorted(folder.glob("*.json")):
            qset = json.loads(path.read_text())
            if not (args.stores / qset["set"] / "store.sqlite3").exists():
                print(f"{qset['set']}: no store in {args.stores}, skipped")
                continue
            with Store.open_existing(args.stores / qset["set"]) as st:
                for q in qset["questions"]:
                    row = {"set": qset["set"], "qid": q["qid"], "kind_written": q["kind"], "question": q["question"],
                           **route(st, q["question"])}
                    rows.append(row)
                    print(f"{row['qid']:<26} {row['kind_written']:<12} -> {row['kind']:<9} "
                          f"{row['named'] or '':<22} {q['question'][:60]}")
    routed = sum(r["named"] is not None for r in rows)
    print(f"{routed} of {len(rows)} named a whole of their archive")
    if args.out:
        args.out.write_text(json.dumps({"rule": "named_whole" if named_whole else "classify only", "rows": rows},
                                       indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
