"""Time to first token, kv mode versus text mode, on the same retrieved events, measured side by side in one run.

Builds (or reuses) a store from real prose (CPython's pydoc_data topics, PSF License), then for each target size
(512, 1k, 2k, 4k retrieved tokens) takes consecutive events of one document until the target is reached and answers
the same question in both modes, best of `--repeat` runs each. Also reports ingest throughput against a bare prefill
of the same tokens with the same model and threads, and disk bytes per token of each block type.

    python bench/kv_vs_text.py [--threads N] [--repeat 3] [--store DIR]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from episodic_cli.engine.answer import Answer, block_evidence, build_messages
from episodic_cli.engine.kv_capture import BLOCK_FILE
from episodic_cli.engine.kv_mode import placeholder
from episodic_cli.engine.llama_backend import LlamaSession
from episodic_cli.engine.retrieve import RetrievedEvent
from episodic_cli.engine.segment import SegmentParams
from episodic_cli.engine.sources import discover
from episodic_cli.engine.workspace import Workspace
from episodic_cli.store import Store

TARGETS = (512, 1024, 2048, 4096)
QUESTION = "What do these passages say about the evaluation order of expressions?"


def haystack(n_chars: int) -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))[:n_chars]


def first_token(ws: Workspace, mode: str, retrieved: list[RetrievedEvent]) -> tuple[float, int]:
    answerer = ws.answerer(mode)
    answer = Answer()
    if mode == "kv":
        messages = build_messages(QUESTION, retrieved, None, block_evidence(retrieved, placeholder))
        stream = answerer.stream(messages, retrieved, time.perf_counter(), answer)
    else:
        stream = answerer.stream(build_messages(QUESTION, retrieved), time.perf_counter(), answer)
    next(iter(stream))
    return answer.timings.first_token_s, answer.prompt_tokens


def bare_prefill_rate(ws: Workspace, tokens: np.ndarray, threads: int | None) -> float:
    """The machine's physical limit for the ingest pass: the same tokens, same model and threads, no logits."""
    session = LlamaSession(ws.model, n_ctx=2048, n_threads=threads, n_seq_max=1)
    session.warm_up()
    t0 = time.perf_counter()
    done = 0
    for a in range(0, len(tokens) - 2047, 2048):  # full windows, like the ingest pass's window
        session.clear()
        session.prefill(tokens[a : a + 2048])
        done += 2048
    session.close()
    return done / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--store", type=Path, default=None, help="reuse a store built by an earlier run")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="epi-bench-")
    store_dir = args.store or Path(tmp) / "store"
    ws = Workspace(store=str(store_dir), threads=args.threads)
    params = SegmentParams()
    ingest_rate = None
    if not (store_dir / "store.sqlite3").exists():
        doc = Path(tmp) / "topics.txt"
        doc.write_text(haystack(40_000))
        st = ws.store_for_writing(params)
        ingestor = ws.ingestor(st, params)
        with st.writer():
            (result,) = list(ingestor.ingest(discover([doc])))
        ingestor.close()
        st.close()
        ingest_rate = result.tokens_per_s
        tokens = ws.model.tokenize(doc.read_text())
        bare = bare_prefill_rate(ws, tokens, args.threads)
    with Store.open_existing(store_dir) as st:
        ws.check_store(st)
        doc = st.documents()[0]
        events = st.events_of(doc.id)
        rows = []
        for target in TARGETS:
            chosen, n = [], 0
            for ev in events:
                if n >= target:
                    break
                chosen.append(RetrievedEvent(ev, doc, 1.0, len(chosen)))
                n += ev.token_end - ev.token_start
            if n < target * 0.9:
                break
            text = min(first_token(ws, "text", chosen)[0] for _ in range(args.repeat))
            kv = min(first_token(ws, "kv", chosen)[0] for _ in range(args.repeat))
            rows.append((target, n, text, kv))
        kv_bytes = os.path.getsize(store_dir / BLOCK_FILE)
        stored_tokens = sum(e.token_end - e.token_start for e in events if e.kv_offset is not None)
    print(f"| retrieved tokens (target) | actual | text mode first token (s) | kv mode first token (s) | kv speed-up |")
    print("|---|---|---|---|---|")
    for target, n, text, kv in rows:
        print(f"| {target} | {n} | {text:.3f} | {kv:.3f} | {text / kv:.1f}x |")
    print(f"\nq8_0 block file: {kv_bytes / max(stored_tokens, 1):,.0f} bytes per token ({stored_tokens} tokens)")
    if ingest_rate is not None:
        print(f"ingest (surprise + capture + q8_0 + embedding + commit): {ingest_rate:.0f} tokens/s; "
              f"bare prefill, same tokens/threads: {bare:.0f} tokens/s; ratio {ingest_rate / bare:.2f}x")
    ws.close()


if __name__ == "__main__":
    main()
