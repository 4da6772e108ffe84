"""The answer context at 8k, 16k and 24k positions: peak memory (the operating system's VmHWM, from
`/usr/bin/time -v`), the time to load that many tokens of stored blocks, the first token, and the decode speed, each
size in a process of its own (issue 38: "raise the answer context toward the model's trained window where it pays").

It reads bench/latency/whole_scope.py's store (its blocks are loaded in document order, again from the start when the
store holds fewer tokens than asked: a block loads at any position).

    python bench/latency/answer_context.py [--sizes 8192 16384 24576] [--out bench/results/answer_context.json]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

DECODE_TOKENS = 48


def one_size(store: str, model: str, size: int, threads: int | None) -> dict:
    from episodic_cli.engine.answer.kv_mode import KVModeAnswerer
    from episodic_cli.engine.answer.records import Answer
    from episodic_cli.engine.budgets import QUESTION_ROOM
    from episodic_cli.engine.paths import cache_dir
    from episodic_cli.engine.retrieval.retrieve import RetrievedEvent
    from episodic_cli.engine.workspace import Workspace
    from episodic_cli.store import Store

    ws = Workspace(model, store, threads)
    with Store.open_existing(ws.store_dir) as st:
        keeper = ws.block_keeper(st)
        answerer = KVModeAnswerer(ws.model, size, keeper, threads, sink_dir=cache_dir() / "kv-sinks")
        answerer.session.warm_up()
        events = [RetrievedEvent(e, d, None, None) for d in st.documents() for e in st.events_of(d.id)]
        events = [r for r in events if keeper.has(answerer_key(r))]
        room = size - DECODE_TOKENS - QUESTION_ROOM
        chosen, used, i = [], 0, 0
        while events and used + events[i % len(events)].n_tokens <= room:
            chosen.append(events[i % len(events)])
            used += events[i % len(events)].n_tokens
            i += 1
        answer = Answer()
        t0 = time.perf_counter()
        stream = answerer.stream("Summarise the sources in three sentences.", chosen, None, t0, answer,
                                 max_tokens=DECODE_TOKENS)
        pieces = 0
        first = None
        for _ in stream:
            pieces += 1
            if first is None:
                first = time.perf_counter()
        end = time.perf_counter()
        decode_tokens = max(1, answer.prompt_tokens and len(ws.model.tokenize(answer.text)))
        out = {"size": size, "tokens_loaded": answer.kv_loaded_tokens, "prefilled": answer.kv_prefilled_tokens,
               "load_s": round(answer.timings.prefill_s, 3), "first_token_s": round((first or end) - t0, 3),
               "decode_tokens_per_s": round((decode_tokens - 1) / max(end - (first or end), 1e-6), 2)}
        answerer.close()
    ws.close()
    return out


def answerer_key(r):
    from episodic_cli.engine.answer.kv_mode import event_block_key
    return event_block_key(r)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=None, help="default: bench/latency/whole_scope.py's store")
    ap.add_argument("--model", default="qwen-1.5b")
    ap.add_argument("--sizes", type=int, nargs="*", default=[8192, 16384, 24576])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=Path("bench/results/answer_context.json"))
    args = ap.parse_args(argv)
    if args.store is None:
        from episodic_cli.engine.paths import cache_dir
        args.store = str(cache_dir() / "bench-whole-scope")
    if args.one is not None:
        print(json.dumps(one_size(args.store, args.model, args.one, args.threads)))
        return 0
    rows = []
    for size in args.sizes:
        cmd = ["/usr/bin/time", "-v", sys.executable, __file__, "--store", args.store, "--model", args.model,
               "--one", str(size)] + (["--threads", str(args.threads)] if args.threads else [])
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stderr[-2000:])
            return 1
        row = json.loads(done.stdout.strip().splitlines()[-1])
        row["peak_rss_mb"] = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1)) // 1024
        rows.append(row)
        print(f"  {size:>6} positions: {row['tokens_loaded']:>6,} tokens loaded in {row['load_s']:.2f} s, first token "
              f"{row['first_token_s']:.2f} s, decode {row['decode_tokens_per_s']:.1f} tokens/s, peak "
              f"{row['peak_rss_mb']:,} MB", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"model": args.model, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
