"""Time to first token, kv mode versus text mode, on the same retrieved events, measured side by side in one run.

Builds (or reuses) a store from real prose (CPython's pydoc_data topics, PSF License), then for each target size
(512, 1k, 2k, 4k retrieved tokens) takes consecutive events of one document until the target is reached and answers
the same question in both modes, best of `--repeat` runs each; kv mode from an empty cache (as a new `epi ask` finds
it) and as a chat follow-up on the same events (the cache kept from the previous question). At 2k retrieved tokens it
also measures kv mode with 0%, 50% and 100% of the events cold (their blocks removed from the tier before each run,
so they are prefilled from text in place and kept again: what a first question pays after `--model OTHER`, or
beyond the KV budget). Also reports disk bytes per token of the tier's blocks. Ingest throughput has its own
script, bench/ingest/ingest_throughput.py.

    python bench/latency/kv_vs_text.py [--threads N] [--repeat 3] [--store DIR]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from episodic_cli.engine.answer.text_mode import Answer
from episodic_cli.engine.answer.kv_mode import event_block_key
from episodic_cli.engine.retrieval.retrieve import RetrievedEvent
from episodic_cli.engine.ingest.segment import SegmentParams
from episodic_cli.engine.documents.sources import discover
from episodic_cli.engine.workspace import Workspace
from episodic_cli.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ingest"))
from ingest_throughput import haystack  # noqa: E402

TARGETS = (512, 1024, 2048, 4096)
COLD_TARGET = 2048
QUESTION = "What do these passages say about the evaluation order of expressions?"
FOLLOW_UP = "And what do they say about operator precedence?"


def first_token(ws: Workspace, st: Store, mode: str, retrieved: list[RetrievedEvent], question: str = QUESTION,
                fresh: bool = True, cold: float = 0.0) -> float:
    """Seconds to the first answer token. `fresh` empties kv mode's cache first, as a new `epi ask` process finds
    it (the sink block still comes from the cache directory); otherwise the previous question's cache is reused,
    as in `epi chat`. `cold`: the share of the events whose blocks are removed from the tier first (spread evenly)."""
    answerer = ws.answerer(mode, st)
    if fresh and mode == "kv":
        answerer.reset()
    n_cold = round(cold * len(retrieved))
    for i in range(n_cold):
        answerer.tier.discard(event_block_key(retrieved[i * len(retrieved) // n_cold]))
    answer = Answer()
    next(iter(answerer.stream(question, retrieved, None, time.perf_counter(), answer)))
    return answer.timings.first_token_s


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
    if not (store_dir / "store.sqlite3").exists():
        doc = Path(tmp) / "topics.txt"
        doc.write_text(haystack(40_000))
        st = ws.store_for_writing(params)
        ingestor = ws.ingestor(st, params)
        with st.writer():
            list(ingestor.ingest(discover([doc])))
        ingestor.close()
        st.close()
    with Store.open_existing(store_dir) as st:
        ws.check_store(st)
        cold_rows, cold_text = [], 0.0
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
            text = min(first_token(ws, st, "text", chosen) for _ in range(args.repeat))
            kv = min(first_token(ws, st, "kv", chosen) for _ in range(args.repeat))
            follow = min(first_token(ws, st, "kv", chosen, FOLLOW_UP, fresh=False) for _ in range(args.repeat))
            rows.append((target, n, text, kv, follow))
            if target == COLD_TARGET:
                cold_rows = [(share, min(first_token(ws, st, "kv", chosen, cold=share) for _ in range(args.repeat)))
                             for share in (0.0, 0.5, 1.0)]
                cold_text = text
        tier = ws.block_keeper(st).tier
        kv_bytes = sum(f.size for f in st.kv_space().block_files() if f.tier_id == tier.dir.name)
        stored_tokens = sum(e.token_end - e.token_start for e in events
                            if tier.path_of(event_block_key(RetrievedEvent(e, doc, None, None))).is_file())
    print("| retrieved tokens (target) | actual | text mode first token (s) | kv mode first token (s) | kv speed-up "
          "| kv chat follow-up (s) | follow-up speed-up |")
    print("|---|---|---|---|---|---|---|")
    for target, n, text, kv, follow in rows:
        print(f"| {target} | {n} | {text:.3f} | {kv:.3f} | {text / kv:.1f}x | {follow:.3f} | {text / follow:.1f}x |")
    print(f"\nkv mode at {COLD_TARGET} retrieved tokens with a share of the events cold (prefilled in place, then kept):")
    print("| cold events | kv first token (s) | vs all hot | vs text mode |")
    print("|---|---|---|---|")
    for share, seconds in cold_rows:
        print(f"| {share:.0%} | {seconds:.3f} | {seconds / cold_rows[0][1]:.1f}x | {seconds / cold_text:.2f}x |")
    print(f"\nq8_0 block file: {kv_bytes / max(stored_tokens, 1):,.0f} bytes per token ({stored_tokens} tokens)")
    ws.close()


if __name__ == "__main__":
    main()
