"""Does a larger layered pool hold the gold more often? Source recall by pool size on every held-out set.

Retrieval only (no answers, so it runs in a minute on the cached stores): for each held-out question, whether the
gold excerpt lies inside the events that
- `kv`       kv mode reads (k=5 hits and their neighbours, up to the 3,072-token evidence budget);
- `pool-1x`  a `--layered` pool holds by default (what the answer context holds, ~7k tokens, in order);
- `pool-Nx`  a pool N times that (`--pool`, lanes sharing positions), for N in `--sizes`;
and the pool's size in tokens and events. A gold excerpt only a larger pool holds is what per-layer selection could
add; whether a layer's query then picks it is what bench/kv/layered.py measures.

    python bench/retrieval/pool_recall.py [--sizes 2 3 6] [--only SET ...] [--out bench/results/pool_recall.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "answers"))
from eval import covers  # noqa: E402
from heldout import load_sets, resolve, stale_questions  # noqa: E402

from episodic_cli.engine.paths import cache_dir  # noqa: E402
from episodic_cli.engine.budgets import DEFAULT_K  # noqa: E402
from episodic_cli.engine.workspace import Workspace  # noqa: E402
from episodic_cli.store import Store, StoreError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=Path, default=Path(__file__).resolve().parents[1] / "heldout")
    ap.add_argument("--stores", type=Path, default=cache_dir() / "heldout")
    ap.add_argument("--only", nargs="*", help="set names (default: all whose store is cached)")
    ap.add_argument("--sizes", nargs="*", type=int, default=[2, 3, 6], help="pool sizes, in answer contexts' room")
    ap.add_argument("--out", type=Path, default=Path("bench/results/pool_recall.json"))
    args = ap.parse_args(argv)
    conditions = ["kv", "pool-1x"] + [f"pool-{n}x" for n in args.sizes]
    rows = []
    for spec in load_sets(args.sets):
        if args.only and spec["set"] not in args.only:
            continue
        if not all(resolve(p).exists() for p in spec["documents"]):
            print(f"{spec['set']}: skipped (documents missing)")
            continue
        ws = Workspace(store=str(args.stores / spec["set"]))
        try:
            store = Store.open_existing(ws.store_dir)
        except StoreError:
            print(f"{spec['set']}: skipped (no cached store: run bench/answers/heldout.py first)")
            continue
        with store:
            stale = set(stale_questions(store, spec["questions"]))
            for q in [q for q in spec["questions"] if q["qid"] not in stale]:
                scope = ws.scope(store, q["question"])
                row = {"set": spec["set"], "qid": q["qid"]}
                for condition, size in zip(conditions, [None, 1] + args.sizes):
                    ws.layered_pool = 0 if size is None else size * ws.room()
                    got = ws.retrieve(store, q["question"], DEFAULT_K, 1, scope=scope) if size is None else \
                        ws.pool(store, q["question"], DEFAULT_K, 1, scope)
                    row[condition] = {"recall": covers([r.event.text for r in got], q["gold_text"]),
                                      "tokens": sum(r.n_tokens for r in got), "events": len(got)}
                rows.append(row)
                print(f"  {q['qid']:<18} " + " ".join(f"{c}={row[c]['recall']:.0f}/{row[c]['tokens']}"
                                                     for c in conditions), flush=True)
        ws.close()
    if not rows:
        print("no cached held-out store; nothing measured")
        return 1
    print("\n| set | n | " + " | ".join(f"{c} recall" for c in conditions) + " | median tokens "
          + " / ".join(conditions) + " |\n|---|---|" + "---|" * len(conditions) + "---|")
    for name in list(dict.fromkeys(r["set"] for r in rows)) + ["all"]:
        sel = [r for r in rows if name in ("all", r["set"])]
        print(f"| {name} | {len(sel)} | " + " | ".join(f"{sum(r[c]['recall'] for r in sel):.0f}" for c in conditions)
              + " | " + " / ".join(f"{statistics.median(r[c]['tokens'] for r in sel):.0f}" for c in conditions) + " |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"sizes": args.sizes, "rows": rows}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
