"""The held-out sets' questions asked inside the big archive, beside the same questions on each set's own store.

For each set named (default: the four unseen lookup sets), every question is asked twice in one run, alternating:
on the set's own store (bench/answers/heldout.py's, `--stores DIR/SET`) and on the big archive's store (`--archive-store`),
which holds the same files byte for byte among 1.3M tokens of others (bench/archive/heldout_paths.json). Scored as
bench/answers/heldout.py scores: source recall (the gold excerpt inside the events read) and the answer (the gold answer in
it). `--retrieval` retrieves only: minutes, no answer model, and safe while the archive is still being ingested.

Each question's rows say where the archive's hits came from: a hit in another document than the set's is what
"retrieval drowned by near-duplicates" looks like.

    python bench/archive/ask_inside.py --archive-store /work/epi-1m/store --stores /work/heldout-stores/lookup-q15 \
        [--retrieval] [--only code-pluggy ...] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "answers"))
from heldout import K, ask, retrieval_row, stale_questions  # noqa: E402

from episodic_cli.engine.workspace import Workspace  # noqa: E402

UNSEEN = ("code-pluggy", "code-truststore", "sections-book", "sections-manual")


def in_set_documents(row: dict, documents: list[str]) -> list[bool]:
    """For each hit of `row` (its 'document:line' citations), whether it lies in one of the set's own documents."""
    return [any(d in hit for d in documents) for hit in row["hits"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archive-store", type=Path, required=True)
    ap.add_argument("--stores", type=Path, required=True, help="the sets' own stores, one folder per set")
    ap.add_argument("--only", nargs="*", default=list(UNSEEN))
    ap.add_argument("--retrieval", action="store_true", help="source recall only, no answers")
    ap.add_argument("--model", default=None, help="the answer model (default: epi ask's)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/archive-1m/ask-inside.json"))
    args = ap.parse_args()
    paths = json.loads((HERE / "heldout_paths.json").read_text())["sets"]
    load_before = os.getloadavg()
    big = Workspace(args.model, store=str(args.archive_store))
    big_store = big.store_for_reading()
    big.check_store(big_store)
    results = []
    for name in args.only:
        spec = json.loads((HERE.parent.parent / paths[name]["file"]).read_text())
        own = Workspace(args.model, store=str(args.stores / name))
        own.__dict__["embedder"] = big.embedder
        own_store = own.store_for_reading()
        own.check_store(own_store)
        stale = set(stale_questions(own_store, spec["questions"]))
        warnings: list[str] = []
        for i, q in enumerate(q for q in spec["questions"] if q["qid"] not in stale):
            row = {"set": name, "qid": q["qid"]}
            for where, ws, st in (("own", own, own_store), ("archive", big, big_store))[:: 1 if i % 2 == 0 else -1]:
                if args.retrieval:
                    r = retrieval_row(ws, st, q)
                    r["in_set"] = in_set_documents(r, paths[name]["documents"])
                else:
                    r = ask(ws, st, q, "kv", warnings)
                row[where] = r
            results.append(row)
            own_r, big_r = row["own"], row["archive"]
            score = "source_recall" if args.retrieval else "contains"
            print(f"{name:<16} {q['qid']:<20} own {own_r[score]:.0f} archive {big_r[score]:.0f}"
                  + (f" hits in set {sum(big_r['in_set'])}/{len(big_r['in_set'])}" if args.retrieval else
                     f" ttft {own_r['first_token_s']:.2f}/{big_r['first_token_s']:.2f}s"), flush=True)
        own_store.close()
        own.close()
    big_store.close()
    big.close()
    score = "source_recall" if args.retrieval else "contains"
    totals = {where: sum(r[where][score] for r in results) for where in ("own", "archive")}
    print(f"\n{score}, {len(results)} questions: own stores {totals['own']:.0f}, archive {totals['archive']:.0f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), "k": K, "retrieval_only": args.retrieval,
                                    "archive_store": str(args.archive_store), "totals": totals,
                                    "load_before": load_before, "load_after": os.getloadavg(), "rows": results},
                                   indent=1))


if __name__ == "__main__":
    main()
