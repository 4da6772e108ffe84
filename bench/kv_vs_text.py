"""Time to first token, kv mode versus text mode, on the same retrieved events, measured side by side in one run.

Builds (or reuses) a store from real prose (CPython's pydoc_data topics, PSF License), then for each target size
(512, 1k, 2k, 4k retrieved tokens) takes consecutive events of one document until the target is reached and answers
the same question in both modes, best of `--repeat` runs each; kv mode from an empty cache (as a new `epi ask` finds
it) and as a chat follow-up on the same events (the cache kept from the previous question). Also reports ingest
throughput against a bare prefill of the same tokens with the same model and threads (logits of the last token
only, and logits of every token as surprise needs them), and disk bytes per token of the block file.

    python bench/kv_vs_text.py [--threads N] [--repeat 3] [--store DIR]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from episodic_cli.engine.answer import Answer
from episodic_cli.engine.llama_backend import LlamaSession
from episodic_cli.engine.retrieve import RetrievedEvent
from episodic_cli.engine.segment import SegmentParams
from episodic_cli.engine.sources import discover
from episodic_cli.engine.workspace import Workspace
from episodic_cli.store import Store

TARGETS = (512, 1024, 2048, 4096)
QUESTION = "What do these passages say about the evaluation order of expressions?"
FOLLOW_UP = "And what do they say about operator precedence?"


def haystack(n_chars: int) -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))[:n_chars]


def first_token(ws: Workspace, mode: str, retrieved: list[RetrievedEvent], question: str = QUESTION,
                fresh: bool = True) -> float:
    """Seconds to the first answer token. `fresh` empties kv mode's cache first, as a new `epi ask` process finds
    it (the sink block still comes from the cache directory); otherwise the previous question's cache is reused,
    as in `epi chat`."""
    answerer = ws.answerer(mode)
    if fresh and mode == "kv":
        answerer.reset()
    answer = Answer()
    next(iter(answerer.stream(question, retrieved, None, time.perf_counter(), answer)))
    return answer.timings.first_token_s


def bare_prefill_rate(ws: Workspace, tokens: np.ndarray, threads: int | None, all_logits: bool = False) -> float:
    """The machine's physical limit for the ingest pass: the same tokens, same model and threads, 2,048-token
    windows like the ingest pass's, nothing else. `all_logits` asks for every token's logits (the lm_head over the
    whole vocabulary per token, which surprise cannot do without) but reads none of them."""
    session = LlamaSession(ws.model, n_ctx=2048, n_threads=threads, n_seq_max=1)
    session.warm_up()
    t0 = time.perf_counter()
    done = 0
    for a in range(0, len(tokens) - 2047, 2048):
        session.clear()
        for b in range(a, a + 2048, 512):
            session.decode(tokens[b : b + 512], b - a, np.ones(512, dtype=np.int8) if all_logits else None)
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
        bare_logits = bare_prefill_rate(ws, tokens, args.threads, all_logits=True)
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
            text = min(first_token(ws, "text", chosen) for _ in range(args.repeat))
            kv = min(first_token(ws, "kv", chosen) for _ in range(args.repeat))
            follow = min(first_token(ws, "kv", chosen, FOLLOW_UP, fresh=False) for _ in range(args.repeat))
            rows.append((target, n, text, kv, follow))
        kv_bytes = os.path.getsize(st.kv_block_path)
        stored_tokens = sum(e.token_end - e.token_start for e in events if e.kv_offset is not None)
    print("| retrieved tokens (target) | actual | text mode first token (s) | kv mode first token (s) | kv speed-up "
          "| kv chat follow-up (s) | follow-up speed-up |")
    print("|---|---|---|---|---|---|---|")
    for target, n, text, kv, follow in rows:
        print(f"| {target} | {n} | {text:.3f} | {kv:.3f} | {text / kv:.1f}x | {follow:.3f} | {text / follow:.1f}x |")
    print(f"\nq8_0 block file: {kv_bytes / max(stored_tokens, 1):,.0f} bytes per token ({stored_tokens} tokens)")
    if ingest_rate is not None:
        print(f"ingest (surprise + capture + q8_0 + embedding + commit): {ingest_rate:.0f} tokens/s; "
              f"bare prefill, same tokens/threads: {bare:.0f} tokens/s; ratio {ingest_rate / bare:.2f}x; "
              f"bare prefill with every token's logits: {bare_logits:.0f} tokens/s; ratio {ingest_rate / bare_logits:.2f}x")
    ws.close()


if __name__ == "__main__":
    main()
