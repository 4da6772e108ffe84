"""Source recall with 160-word embedder windows against 256-piece token windows, side by side, on the held-out sets.

Needs the stores a `python bench/heldout.py --retrieval --stores DIR` run of an epi from before token windows left in
DIR (embedded with 160-word windows). For each set: copy its store (SQLite and index only: retrieval reads no KV
block), give the copy the new windows with `epi reembed`'s code (engine/embed/reembed.py), then ask each question's
retrieval of both, as bench/heldout.py --retrieval does (k=5, +-1 neighbour). The events are the same in both, so
only the vectors differ. Prints and writes per set: source recall (the gold excerpt among the events read), the
gold excerpt inside a hit itself, and the re-embedding time.

    python bench/embedder_windows.py --stores DIR [--only SET ...] [--out bench/results/embedder-windows.json]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
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


def recall(ws: Workspace, store_dir: Path, questions: list[dict]) -> list[dict]:
    store = ws.store_for_reading()
    try:
        ws.check_store(store)
        return [retrieval_row(ws, store, q) for q in questions]
    finally:
        store.close()


def run_set(spec: dict, stores: Path, scratch: Path, threads: int | None) -> dict | None:
    store_dir = stores / spec["set"]
    if not store_dir.exists():
        print(f"{spec['set']}: no store in {stores}; skipped", flush=True)
        return None
    words = Workspace(reader_model(), store=str(store_dir), threads=threads)
    store = words.store_for_reading()
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
    tokens = Workspace(reader_model(), store=str(copy), threads=threads)
    tokens.__dict__["model"] = words.model  # one model loaded for both
    tokens.__dict__["embedder"] = words.embedder
    store = tokens.store_for_reading()
    try:
        started = time.perf_counter()
        result = tokens.reembed(store)
        seconds = time.perf_counter() - started
    finally:
        store.close()
    rows = {"words": recall(words, store_dir, questions), "tokens": recall(tokens, copy, questions)}
    words.close()
    tokens.close()
    summary = {"set": spec["set"], "questions": len(questions), "events": n_events, "reembed_s": round(seconds, 1),
               "reembedded": result.done}
    for name, found in rows.items():
        summary[f"{name}_source_recall"] = int(sum(r["source_recall"] for r in found))
        summary[f"{name}_gold_in_hit"] = sum(r["gold_in_hit"] is not None for r in found)
        summary[f"{name}_gold_first"] = sum(r["gold_in_hit"] == 0 for r in found)
    summary["changed"] = [{"qid": a["qid"], "words_hit_rank": a["gold_in_hit"], "tokens_hit_rank": b["gold_in_hit"]}
                          for a, b in zip(rows["words"], rows["tokens"]) if a["gold_in_hit"] != b["gold_in_hit"]
                          or a["source_recall"] != b["source_recall"]]
    summary["rows"] = rows
    print(f"{spec['set']:<16} n={len(questions):>2} src words {summary['words_source_recall']:>2} tokens "
          f"{summary['tokens_source_recall']:>2} | in a hit words {summary['words_gold_in_hit']:>2} tokens "
          f"{summary['tokens_gold_in_hit']:>2} | first words {summary['words_gold_first']:>2} tokens "
          f"{summary['tokens_gold_first']:>2} | {n_events} events re-embedded in {seconds:.0f} s"
          + "".join(f" | {c['qid']} rank {c['words_hit_rank']}->{c['tokens_hit_rank']}" for c in summary["changed"]),
          flush=True)
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=Path, default=Path(__file__).resolve().parent / "heldout")
    ap.add_argument("--stores", type=Path, required=True, help="stores a heldout.py --retrieval run left")
    ap.add_argument("--only", nargs="*", help="set names (default: all)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/results/embedder-windows.json"))
    args = ap.parse_args()
    load_start = load_average()
    results = []
    with tempfile.TemporaryDirectory(prefix="epi-windows-") as scratch:
        for spec in load_sets(args.sets):
            if args.only and spec["set"] not in args.only:
                continue
            found = run_set(spec, args.stores, Path(scratch), args.threads)
            if found:
                results.append(found)
    totals = {key: sum(r[key] for r in results) for key in ("questions", "words_source_recall",
                                                           "tokens_source_recall", "words_gold_in_hit",
                                                           "tokens_gold_in_hit", "words_gold_first",
                                                           "tokens_gold_first", "events", "reembedded")}
    totals["reembed_s"] = round(sum(r["reembed_s"] for r in results), 1)
    print(f"{'total':<16} n={totals['questions']} src words {totals['words_source_recall']} tokens "
          f"{totals['tokens_source_recall']} | in a hit words {totals['words_gold_in_hit']} tokens "
          f"{totals['tokens_gold_in_hit']} | first words {totals['words_gold_first']} tokens "
          f"{totals['tokens_gold_first']} | {totals['reembedded']} vectors in {totals['reembed_s']} s "
          f"(load {load_start} -> {load_average()})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "command": " ".join(sys.argv),
                                    "load_start": load_start, "load_end": load_average(), "totals": totals,
                                    "sets": results}, indent=1), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
