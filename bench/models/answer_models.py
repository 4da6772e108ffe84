"""Which model does what: ingest speed, KV bytes, first token (blocks hot, cold, text) and peak memory per model.

Each model runs in a process of its own, one after the other, on the same text (CPython's pydoc topics, ~9k tokens
by default) and the same questions: it ingests the text into a fresh store (surprise segmentation with its own
blocks kept, as `epi ingest --model M` does), then answers each question three ways with the retrieved events read
whole: kv mode with the blocks the ingest kept (hot), kv mode with the tier emptied first (cold: every event
prefilled from text), and text mode. Peak memory is the process's own high-water mark (ru_maxrss, as VmHWM). Ratios
are against the first model listed, measured in the same run.

    python bench/models/answer_models.py [--models smollm2 qwen-0.5b qwen-1.5b] [--chars 40000] [--threads N]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUESTIONS = [
    "What does the with statement do with the context manager's __exit__ method?",
    "How are keyword arguments matched to parameters in a function call?",
    "What happens when an exception is raised inside a finally clause?",
]


def run_model(model: str, chars: int, threads: int | None, cache: Path) -> dict:
    """One model's figures, measured in this process (the driver starts one process per model)."""
    from pydoc_data.topics import topics

    from episodic_cli.engine.ask_options import AskOptions
    from episodic_cli.engine.documents.sources import discover
    from episodic_cli.engine.ingest.segment import SegmentParams
    from episodic_cli.engine.workspace import Workspace, apply_kv_budget

    root = Path(tempfile.mkdtemp(prefix="epi-answer-models-"))
    (root / "home").mkdir()
    (root / "home" / "cache").symlink_to(cache, target_is_directory=True)  # assembled models are reused
    os.environ["EPI_HOME"] = str(root / "home")
    doc = root / "topics.txt"
    doc.write_text("\n\n".join(topics[k] for k in sorted(topics))[:chars], encoding="utf-8")

    ws = Workspace(model, str(root / "store"), threads)
    t_load = time.perf_counter()
    ws.model  # noqa: B018 - loaded before the clock, as the CLI does behind its spinner
    load_s = time.perf_counter() - t_load
    ws.embedder.load(batches=True)
    params = SegmentParams()
    store = ws.store_for_writing(params)
    t0 = time.perf_counter()
    with ws.ingest_run(store, params, "q8_0", None) as ingestor:
        results = list(ingestor.ingest(discover([doc])))
    ingest_s = time.perf_counter() - t0
    tokens = sum(r.tokens for r in results)
    events = sum(r.events for r in results)
    ws.embedder.load(batches=False)

    def ask(st, question: str, mode: str) -> dict:
        if mode == "kv":
            ws.answerer(mode, st).reset()  # no prefix kept from the question before: each answer starts empty
        if emptied:
            with st.writer():
                apply_kv_budget(st, 0)  # and no block kept by the one before
        # no cold limit: every event is read however long preparing it takes, so that the rows compare the models
        result, stream = ws.ask(st, question, AskOptions(mode=mode, narrow=False, short=False, cold_seconds=None,
                                                        second_look=False))
        text = "".join(stream)
        a = result.answer
        return {"first_token_s": a.timings.first_token_s, "total_s": a.timings.total_s,
                "retrieved_tokens": sum(r.n_tokens for r in result.retrieved), "loaded": a.kv_loaded_tokens,
                "prefilled": a.kv_prefilled_tokens, "answer": text.strip()[:160]}

    emptied = False
    st = ws.store_for_reading()
    try:
        kv_bytes = st.kv_space().used_bytes()
        hot = [ask(st, q, "kv") for q in QUESTIONS]
        text = [ask(st, q, "text") for q in QUESTIONS]
    finally:
        st.close()
    emptied = True  # the tier emptied before each answer: every retrieved event is prefilled from text
    st = ws.store_for_reading()
    try:
        cold = [ask(st, q, "kv") for q in QUESTIONS]
    finally:
        st.close()
    ws.close()
    med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
    return {"model": model, "file": ws.prepared.source.name, "form": ws.prepared.form,
            "n_params": ws.model.info.n_params, "load_s": round(load_s, 2),
            "ingest_tokens": tokens, "ingest_events": events, "ingest_s": round(ingest_s, 1),
            "ingest_tokens_per_s": round(tokens / ingest_s, 1), "kv_bytes_per_token": round(kv_bytes / tokens),
            "first_token_hot_s": round(med(hot, "first_token_s"), 3),
            "first_token_cold_s": round(med(cold, "first_token_s"), 3),
            "first_token_text_s": round(med(text, "first_token_s"), 3),
            "retrieved_tokens": med(hot, "retrieved_tokens"),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "asks": {"hot": hot, "cold": cold, "text": text}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["smollm2", "qwen-0.5b", "qwen-1.5b"])
    ap.add_argument("--chars", type=int, default=40_000, help="prose to ingest (40,000 chars ~ 9k tokens)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/results/answer_models.json"))
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure this model and print its JSON
    args = ap.parse_args(argv)
    from episodic_cli.engine.paths import cache_dir

    if args.one:
        print(json.dumps(run_model(args.one, args.chars, args.threads, cache_dir())))
        return 0
    rows = []
    for model in args.models:
        cmd = [sys.executable, __file__, "--one", model, "--chars", str(args.chars)]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        print(f"{model}: measuring", flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{model}: failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    if not rows:
        return 1
    base = rows[0]
    print(f"\n| model | ingest tok/s | x {base['model']} | KV bytes/token | first token hot / cold / text (s) | "
          "text/hot | load (s) | peak RSS (MB) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} ({r['form']}) | {r['ingest_tokens_per_s']} | "
              f"{r['ingest_tokens_per_s'] / base['ingest_tokens_per_s']:.2f}x | {r['kv_bytes_per_token']:,} | "
              f"{r['first_token_hot_s']:.2f} / {r['first_token_cold_s']:.2f} / {r['first_token_text_s']:.2f} | "
              f"{r['first_token_text_s'] / r['first_token_hot_s']:.0f}x | {r['load_s']:.1f} | {r['peak_rss_mb']:,} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": "python bench/models/answer_models.py " + " ".join(argv or sys.argv[1:]),
                                    "cpus": len(os.sched_getaffinity(0)), "load_end": os.getloadavg(),
                                    "date": time.strftime("%Y-%m-%d %H:%M"), "rows": rows}, indent=1))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
