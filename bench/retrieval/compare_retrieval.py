"""Two `bench/answers/heldout.py --retrieval` runs side by side, per set: source recall, the gold excerpt in a hit, in the
first hit, and which questions moved (the rank of the first hit holding the gold excerpt, before -> after).

    python bench/retrieval/compare_retrieval.py BEFORE/retrieval.json AFTER/retrieval.json [AFTER2/retrieval.json ...]

Several AFTER files are read as one (a run a set at a time writes one file per set); only the questions in both are
compared.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def rows_by_set(paths: list[Path]) -> dict[str, dict[str, dict]]:
    sets: dict[str, dict[str, dict]] = {}
    for path in paths:
        for s in json.loads(path.read_text(encoding="utf-8"))["sets"]:
            if s.get("rows"):
                sets.setdefault(s["set"], {}).update({r["qid"]: r for r in s["rows"]})
    return sets


def counts(rows: list[dict]) -> tuple[int, int, int]:
    return (sum(bool(r["source_recall"]) for r in rows), sum(r["gold_in_hit"] is not None for r in rows),
            sum(r["gold_in_hit"] == 0 for r in rows))


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    before, after = rows_by_set([Path(argv[0])]), rows_by_set([Path(p) for p in argv[1:]])
    print("| set | n | source recall | gold in a hit | gold in the first hit | moved (rank before -> after) |")
    print("|---|---|---|---|---|---|")
    total = [0] * 7
    for name in sorted(set(before) & set(after)):
        qids = [q for q in before[name] if q in after[name]]
        b, a = counts([before[name][q] for q in qids]), counts([after[name][q] for q in qids])
        moved = [f"{q} {before[name][q]['gold_in_hit']}->{after[name][q]['gold_in_hit']}" for q in qids
                 if before[name][q]["gold_in_hit"] != after[name][q]["gold_in_hit"]]
        print(f"| {name} | {len(qids)} | {b[0]} -> {a[0]} | {b[1]} -> {a[1]} | {b[2]} -> {a[2]} | "
              f"{', '.join(moved) or '-'} |")
        total = [t + x for t, x in zip(total, (len(qids), *b, *a))]
    n, *rest = total
    print(f"| all | {n} | {rest[0]} -> {rest[3]} | {rest[1]} -> {rest[4]} | {rest[2]} -> {rest[5]} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
