"""Source recall of a store against a changed copy of it, side by side, on the held-out sets: one change at a time.

Needs the stores a `python bench/answers/heldout.py --retrieval --stores DIR` run of an epi from before token windows left in
DIR (embedded with 160-word windows). For each set: copy its store (SQLite and index only: retrieval reads no KV
block), change the copy, then ask each question's retrieval of both, as bench/answers/heldout.py --retrieval does (k=5, +-1
neighbour). The events are the same in both. Prints and writes per set: source recall (the gold excerpt among the
events read), the gold excerpt inside a hit, inside the first hit, and how long the change took. Changes:

- `token-windows`: the copy gets 256-piece embedder windows with `epi reembed`'s code (engine/embed/reembed.py).

The porter-stemmed lexical index was compared by this script at 30aaa2f (`--change porter`,
bench/results/retrieval-porter.json), before migration m010 made it every store's: this epi stems a store's index
when it opens it, so the unstemmed side can no longer be had and that change is gone from here.

    python bench/retrieval/retrieval_variants.py --stores DIR --change token-windows [--only SET ...] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "answers"))
from eval import load_average  # noqa: E402
from heldout import load_sets, retrieval_row, stale_questions  # noqa: E402

from episodic_cli.engine.embed.embedder import LEGACY_NAME  # noqa: E402
from episodic_cli.engine.llama.models import reader_model  # noqa: E402
from episodic_cli.engine.workspace import Workspace  # noqa: E402


def copy_store(source: Path, target: Path) -> None:
    """The store's database (a consistent copy, WAL included) and dense index; an empty KV folder."""
    target.mkdir(parents=True)
    (target / "kv").mkdir()
    (target / "lock").touch()
    with sqlite3.connect(source / "store.sqlite3") as src, sqlite3.connect(target / "store.sqlite3") as dst:
        src.backup(dst)
    for name in ("index.hnsw", "index.hnsw.crc32"):
        if (source / name).exists():
            shutil.copy2(source / name, target / name)


def reembed_copy(ws: Workspace) -> int:
    store = ws.store_for_reading()
    try:
        return ws.reembed(store).done
    finally:
        store.close()


CHANGES = {"token-windows": reembed_copy}


def recall(ws: Workspace, store_dir: Path, questions: list[dict]) -> list[dict]:
    store = ws.store_for_reading()
    try:
        ws.check_store(store)
        return [retrieval_row(ws, store, q) for q in questions]
    finally:
        store.close()


def run_set(spec: dict, stores: Path, scratch: Path, changes: list[str], threads: int | None) -> dict | None:
    store_dir = stores / spec["set"]
    if not store_dir.exists():
        print(f"{spec['set']}: no store in {stores}; skipped", flush=True)
        return None
    before = Workspace(reader_model(), store=str(store_dir), threads=threads)
    store = before.store_for_reading()
    try:
        if store.identity.embedder != LEGACY_NAME:
            print(f"{spec['set']}: its store is embedded with {store.identity.embedder}, not word windows; skipped")
            return None
        stale = set(stale_questions(store, spec["questions"]))
        n_events = sum(d.n_events for d in store.documents())
    finally:
        store.close()
    questions = [q for q in spec["questions"] if q["qid"] not in stale]
    copy = scratch / spec["set"]
    copy_store(store_dir, copy)
    after = Workspace(reader_model(), store=str(copy), threads=threads)
    after.__dict__["model"] = before.model  # one model loaded for both
    after.__dict__["embedder"] = before.embedder
    started = time.perf_counter()
    changed_rows = sum(CHANGES[change](after) for change in changes)
    seconds = time.perf_counter() - started
    rows = {"before": recall(before, store_dir, questions), "after": recall(after, copy, questions)}
    before.close()
    after.close()
    summary = {"set": spec["set"], "questions": len(questions), "events": n_events, "change_s": round(seconds, 1),
               "rows_changed": changed_rows}
    for name, found in rows.items():
        summary[f"{name}_source_recall"] = int(sum(r["source_recall"] for r in found))
        summary[f"{name}_gold_in_hit"] = sum(r["gold_in_hit"] is not None for r in found)
        summary[f"{name}_gold_first"] = sum(r["gold_in_hit"] == 0 for r in found)
    summary["changed"] = [{"qid": a["qid"], "before_hit_rank": a["gold_in_hit"], "after_hit_rank": b["gold_in_hit"]}
                          for a, b in zip(rows["before"], rows["after"]) if a["gold_in_hit"] != b["gold_in_hit"]
                          or a["source_recall"] != b["source_recall"]]
    for found in rows.values():
        for r in found:
            r["hits"] = r["hits"][:2]  # the two best hits' citations: enough to see a move, and a small file
    summary["rows"] = rows
    print(f"{spec['set']:<16} n={len(questions):>2} src before {summary['before_source_recall']:>2} after "
          f"{summary['after_source_recall']:>2} | in a hit before {summary['before_gold_in_hit']:>2} after "
          f"{summary['after_gold_in_hit']:>2} | first before {summary['before_gold_first']:>2} after "
          f"{summary['after_gold_first']:>2} | {changed_rows} rows changed in {seconds:.0f} s"
          + "".join(f" | {c['qid']} rank {c['before_hit_rank']}->{c['after_hit_rank']}" for c in summary["changed"]),
          flush=True)
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=Path, default=Path(__file__).resolve().parents[1] / "heldout")
    ap.add_argument("--stores", type=Path, required=True, help="stores a heldout.py --retrieval run left")
    ap.add_argument("--only", nargs="*", help="set names (default: all)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--change", nargs="+", choices=sorted(CHANGES), required=True,
                    help="what the copy gets (several: all of them, in this order)")
    ap.add_argument("--out", type=Path, default=None, help="default: bench/results/retrieval-CHANGE.json")
    args = ap.parse_args()
    args.out = args.out or Path(f"bench/results/retrieval-{'+'.join(args.change)}.json")
    load_start = load_average()
    results = []
    with tempfile.TemporaryDirectory(prefix="epi-windows-") as scratch:
        for spec in load_sets(args.sets):
            if args.only and spec["set"] not in args.only:
                continue
            found = run_set(spec, args.stores, Path(scratch), args.change, args.threads)
            if found:
                results.append(found)
    totals = {key: sum(r[key] for r in results) for key in ("questions", "before_source_recall",
                                                           "after_source_recall", "before_gold_in_hit",
                                                           "after_gold_in_hit", "before_gold_first",
                                                           "after_gold_first", "events", "rows_changed")}
    totals["change_s"] = round(sum(r["change_s"] for r in results), 1)
    print(f"{'total':<16} n={totals['questions']} src before {totals['before_source_recall']} after "
          f"{totals['after_source_recall']} | in a hit before {totals['before_gold_in_hit']} after "
          f"{totals['after_gold_in_hit']} | first before {totals['before_gold_first']} after "
          f"{totals['after_gold_first']} | {totals['rows_changed']} rows changed in {totals['change_s']} s "
          f"(load {load_start} -> {load_average()})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "command": " ".join(sys.argv),
                                    "load_start": load_start, "load_end": load_average(), "totals": totals,
                                    "sets": results}, indent=1), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
