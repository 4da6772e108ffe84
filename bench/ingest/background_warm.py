"""From the start of `epi ingest` to the first answer: the answer model's blocks kept in the reading pass (one
reader), prepared after it (two readers) or by a background job while the user asks (`--background`), side by side
on the same text in fresh stores, beside the answer model's bare prefill of the same tokens (issue 36).

Timed as processes, as a user runs them, the map left out of all (`--no-map`):
- two readers: `epi ingest DOC --model smollm2` (the bundled model cuts the events, then the answer model prepares
  its blocks), then `epi ask Q`: the first answer comes after both, from the blocks;
- one reader: `epi ingest DOC --model ANSWER_MODEL` (the answer model cuts the events and keeps its blocks in the
  same pass), then `epi ask Q`, from the blocks;
- background: `epi ingest DOC --background`, then at once `epi ask Q` (events without a block read from text within
  `--cold-seconds`, while the job warms beside it), then the job's end, then `epi ask Q` again (from the blocks);
- bare prefill: the answer model's llama.cpp prefill of the same tokens, nothing else, in this process
  (bench/ingest/ingest_throughput.py's bare_prefill_rate).

    python bench/ingest/background_warm.py [--chars 20000] [--question "..."] [--rows two one background] [--bare-tokens N]

`--chars 465000` is the whole of the topics, ~100k tokens: issue 36's book (each row then takes most of an hour on
2 cores).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ingest_default import fresh_home, run
from ingest_throughput import bare_prefill_rate, haystack

from episodic_cli.background import job_status
from episodic_cli.store.job_status import RUNNING_PHASES

ROWS = ("two", "one", "background")
QUESTION = "What does the assert statement do when the expression is false?"


def ask(epi: list[str], store: Path, question: str, env: dict) -> tuple[float, dict]:
    seconds, _, out = run([*epi, "ask", question, "--store", str(store), "--json"], env)
    return seconds, json.loads(out)


def wait_for_job(store: Path) -> dict | None:
    """The job's status once it has stopped running, read in this process from its status file each second (what
    `epi warm --status` reports, without starting a Python process beside the job every second)."""
    while True:
        job = job_status(store)
        if job is None or job.phase not in RUNNING_PHASES:
            return None if job is None else job.as_json()
        time.sleep(1.0)


def timed_background(epi: list[str], store: Path, doc: Path, question: str, env: dict) -> dict:
    """`epi ingest --background`, a question at once (cold), the job's end, the question again (from the blocks)."""
    t0 = time.perf_counter()
    t_read, _, _ = run([*epi, "ingest", str(doc), "--store", str(store), "--no-map", "--background", "--json"], env)
    t_cold, cold = ask(epi, store, question, env)
    job = wait_for_job(store)
    t_done = time.perf_counter() - t0
    t_hot, hot = ask(epi, store, question, env)
    return {"ingest_returns_s": round(t_read, 1), "cold_ask_s": round(t_cold, 1),
            "first_answer_s": round(t_read + t_cold, 1), "job_done_s": round(t_done, 1),
            "good_answer_s": round(t_done + t_hot, 1), "job": job,
            "cold_answer": cold["text"], "cold_left_out_tokens": cold["left_out_tokens"],
            "hot_answer": hot["text"], "hot_prefilled_tokens": hot["kv_prefilled_tokens"]}


def events_of(store: Path) -> int:
    import sqlite3

    with sqlite3.connect(store / "store.sqlite3") as db:
        return db.execute("SELECT count(*) FROM events").fetchone()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chars", type=int, default=20_000)
    ap.add_argument("--question", default=QUESTION)
    ap.add_argument("--out", type=Path, default=Path("bench/results/background_warm.json"))
    ap.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS),
                    help="which ways to time (default all); --chars 465000 (~100k tokens) takes most of an hour a row")
    ap.add_argument("--bare-tokens", type=int, default=None,
                    help="time the bare prefill on the text's first N tokens only (each 2,048-token window is prefilled "
                    "from an empty cache, so every window costs the same) and scale it to the whole; default: all")
    args = ap.parse_args(argv)
    if args.chars < 10_000 or (args.bare_tokens is not None and args.bare_tokens < 2048):
        ap.error("the bare prefill is timed in whole 2,048-token windows: give --chars 10000 or more (~2.3k tokens) "
                 "and --bare-tokens 2048 or more")
    from episodic_cli.engine.llama.models import answer_model
    from episodic_cli.engine.workspace import Workspace

    root, env = fresh_home("epi-background-")
    doc = root / "topics.txt"
    doc.write_text(haystack(args.chars), encoding="utf-8")
    epi = [sys.executable, "-m", "episodic_cli"]
    load_start = os.getloadavg()

    answerer = answer_model(None)
    readers = {}
    for name, reader in (("two readers", "smollm2"), ("one reader", answerer)):
        if name.split()[0] not in args.rows:
            continue
        store = root / name.replace(" ", "-")
        t_ingest, _, _ = run([*epi, "ingest", str(doc), "--store", str(store), "--model", reader, "--no-map", "--json"],
                             env)
        t_ask, answer = ask(epi, store, args.question, env)
        readers[name] = {"ingest_s": round(t_ingest, 1), "ask_s": round(t_ask, 1),
                         "first_answer_s": round(t_ingest + t_ask, 1), "answer": answer["text"],
                         "kv_prefilled_tokens": answer["kv_prefilled_tokens"], "events": events_of(store)}
    background = timed_background(epi, root / "background", doc, args.question, env) \
        if "background" in args.rows else None

    ws = Workspace(answerer)
    tokens = ws.model.tokenize(doc.read_text(encoding="utf-8"))
    rate = bare_prefill_rate(ws, tokens[: args.bare_tokens], None, all_logits=False)
    ws.close()
    bare = len(tokens) / rate
    rows = {"tokens": len(tokens), "bare_prefill_s": round(bare, 1), "bare_prefill_timed_tokens":
            len(tokens[: args.bare_tokens]), "answer_model": answerer, **readers,
            "background": background}
    print(f"{len(tokens):,} tokens; the answer model's bare prefill: {bare:.1f} s ({rate:.0f} tokens/s)\n")
    print("| | seconds | / bare prefill |\n|---|---|---|")
    lines = [(f"{name}: ingest, then the first answer (hot)", r["first_answer_s"]) for name, r in readers.items()]
    if background is not None:
        lines += [("--background: ingest returns", background["ingest_returns_s"]),
                  ("--background: first answer (cold, while it warms)", background["first_answer_s"]),
                  ("--background: the job done", background["job_done_s"]),
                  ("--background: the first answer from the blocks", background["good_answer_s"])]
    for name, seconds in lines:
        print(f"| {name} | {seconds} | {seconds / bare:.2f}x |")
    for name, r in readers.items():
        print(f"{name}: ingest {r['ingest_s']} s ({len(tokens) / r['ingest_s']:.0f} answer-model tokens/s), "
              f"{r['events']} events")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": "python bench/ingest/background_warm.py " + " ".join(argv or sys.argv[1:]),
                                    "date": time.strftime("%Y-%m-%d %H:%M"), "load_start": load_start,
                                    "load_end": os.getloadavg(), **rows}, indent=1))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
