"""A whole-chapter question with the chapter's blocks present, against re-reading the same chapter as text: the
first token of each, side by side in one run (issue 38: within 3 s, and at least 30x sooner than re-reading).

The store is the Vim user manual's chapters 10-12 (on every Debian machine with vim; not a held-out document:
only the timing is measured here), ingested with the defaults, so the answer model's blocks are there. Each
condition is asked `--repeat` times, alternating, so that a change in the machine's load falls on both.

    python bench/latency/whole_scope.py [--store DIR] [--question Q] [--repeat 2] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from episodic_cli.engine.ask_options import AskOptions
from episodic_cli.engine.paths import cache_dir
from episodic_cli.engine.retrieval.question_kind import QuestionKind
from episodic_cli.engine.workspace import Workspace
from episodic_cli.store import Store

DOCS = [Path(f"/usr/share/vim/vim90/doc/usr_{n}.txt") for n in (10, 11, 12)]
QUESTION = "Summarise chapter 10."


def first_token(ws: Workspace, st: Store, mode: str, question: str = QUESTION) -> dict:
    holder = {}

    def stop() -> bool:  # the first token is what is timed
        return bool(holder["result"].answer.text)

    ws.answerer(mode, st, whole=True).reset() if mode == "kv" else None  # load every block, reuse nothing
    t0 = time.perf_counter()
    options = AskOptions(mode=mode, kind=QuestionKind.WHOLE, cold_seconds=None)
    result, stream = ws.ask(st, question, options, should_stop=lambda: stop())
    holder["result"] = result
    for _ in stream:
        break
    elapsed = time.perf_counter() - t0
    return {"mode": mode, "first_token_s": round(elapsed, 3), "read": result.reading,
            "tokens": sum(r.n_tokens for r in result.retrieved),
            "kv_loaded": result.answer.kv_loaded_tokens, "kv_prefilled": result.answer.kv_prefilled_tokens}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=cache_dir() / "bench-whole-scope")
    ap.add_argument("--model", default="qwen-1.5b")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--question", default=QUESTION, help="a whole-part question about a part of --store's documents")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/results/whole_scope.json"))
    args = ap.parse_args(argv)
    if not (args.store / "store.sqlite3").exists():
        print(f"ingesting {', '.join(d.name for d in DOCS)} into {args.store} (the answer model's blocks too)")
        subprocess.run([sys.executable, "-m", "episodic_cli", "ingest", *map(str, DOCS), "--store", str(args.store),
                        "--answer-model", args.model, "--no-map"], check=True)
    ws = Workspace(args.model, str(args.store), args.threads)
    rows = []
    with Store.open_existing(ws.store_dir) as st:
        ws.embedder.load(batches=False)
        for mode in ("kv", "text"):
            ws.answerer(mode, st, whole=True)
        for i in range(args.repeat):
            for mode in (("kv", "text") if i % 2 == 0 else ("text", "kv")):
                row = first_token(ws, st, mode, args.question)
                rows.append(row)
                print(f"  {mode:<4} first token {row['first_token_s']:7.2f} s  ({row['read']}; loaded "
                      f"{row['kv_loaded']:,}, prefilled {row['kv_prefilled']:,})", flush=True)
    ws.close()
    kv = statistics.median(r["first_token_s"] for r in rows if r["mode"] == "kv")
    text = statistics.median(r["first_token_s"] for r in rows if r["mode"] == "text")
    summary = {"question": args.question, "store": str(args.store), "model": args.model, "threads": args.threads or os.cpu_count(),
               "kv_first_token_median_s": kv, "text_first_token_median_s": text,
               "text_over_kv": round(text / kv, 1), "rows": rows,
               "load_average": os.getloadavg()}
    print(f"whole chapter: kv {kv:.2f} s, re-read as text {text:.2f} s: {text / kv:.1f}x sooner from the blocks")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
