"""Ingest throughput versus a bare llama.cpp prefill of the same tokens, same model and threads, side by side.

Each round, in one process and in turn: a bare prefill with the last token's logits only (llama.cpp's plain
prompt processing), a bare prefill with every token's logits (what any pass that computes surprise must pay: the
lm_head over the whole vocabulary per token), and the full ingest (surprise, streaming segmentation with boundary
refinement, KV capture + quantization, representative keys, embedding, commit) into a fresh store. The bare
prefills decode 2,048-token windows from empty, so their attention spans 0-2,048 cells, 1,280 on average (llama.cpp
pads the span to 256 cells); the ingest window holds the sinks + the local span + one batch (1,280 cells with the
defaults). The best round of each is reported (a shared machine only ever slows a run down), with every round's
ratios, and the share of ingest time spent inside llama_decode. `--surprise-at every clean` ingests once each way
per round (segment.SURPRISE_AT: surprise at every token, or only where an event may start), alternating the order.

    python bench/ingest/ingest_throughput.py [--threads N] [--rounds 3] [--chars 40000] [--kv q8_0] [--model qwen-1.5b]
        [--surprise-at clean every]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from episodic_cli.engine.llama import backend as llama_backend
from episodic_cli.engine.llama.backend import INGEST_BATCH, LlamaSession
from episodic_cli.engine.ingest.segment import SURPRISE_AT, SegmentParams
from episodic_cli.engine.documents.sources import discover
from episodic_cli.engine.workspace import Workspace

WINDOW = 2048


def haystack(n_chars: int) -> str:
    """Real prose: CPython's pydoc_data topics (PSF License)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))[:n_chars]


def bare_prefill_rate(ws: Workspace, tokens: np.ndarray, threads: int | None, all_logits: bool) -> float:
    """The same tokens in 2,048-token windows, each decoded from an empty cache in 512-token batches; nothing else.
    `all_logits` asks for every token's logits but reads none of them."""
    session = LlamaSession(ws.model, n_ctx=WINDOW, n_threads=threads, n_seq_max=1)
    session.warm_up()
    wanted = np.ones(INGEST_BATCH, dtype=np.int8) if all_logits else None
    done = 0
    t0 = time.perf_counter()
    for a in range(0, len(tokens) - WINDOW + 1, WINDOW):
        session.clear()
        for b in range(a, a + WINDOW, INGEST_BATCH):
            session.decode(tokens[b : b + INGEST_BATCH], b - a, wanted)
        done += WINDOW
    seconds = time.perf_counter() - t0
    session.close()
    return done / seconds


class DecodeClock:
    """Time spent inside LlamaSession.decode (llama_decode and the batch setup around it)."""

    def __init__(self):
        self.seconds = 0.0
        self._decode = LlamaSession.decode

    def __enter__(self):
        clock, decode = self, self._decode

        def timed(session, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return decode(session, *args, **kwargs)
            finally:
                clock.seconds += time.perf_counter() - t0

        llama_backend.LlamaSession.decode = timed
        return self

    def __exit__(self, *exc):
        llama_backend.LlamaSession.decode = self._decode


def ingest_rate(ws: Workspace, doc: Path, kind: str, surprise_at: str = "clean") -> tuple[float, float, int]:
    """tokens/s of one full ingest of `doc` into a new store, the share of it inside decode, and the events cut."""
    params = SegmentParams(surprise_at=surprise_at)
    st = ws.store_for_writing(params)
    ingestor = ws.ingestor(st, params, kind)
    ingestor.session.warm_up()
    with DecodeClock() as clock, st.writer():
        (result,) = list(ingestor.ingest(discover([doc])))
    ingestor.close()
    st.close()
    if result.status != "ingested":
        raise SystemExit(f"ingest failed: {result.error}")
    return result.tokens_per_s, clock.seconds / result.seconds, result.events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chars", type=int, default=40_000, help="prose to ingest (40,000 chars ~ 9.6k tokens)")
    ap.add_argument("--kv", default="q8_0", help="KV block type stored by the ingest")
    ap.add_argument("--model", default=None, help="the reading model (default: the engine's)")
    ap.add_argument("--surprise-at", nargs="+", choices=SURPRISE_AT, default=[SegmentParams().surprise_at],
                    help="ingest once per choice each round (default: the default's only)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="epi-ingest-bench-"))
    doc = tmp / "topics.txt"
    doc.write_text(haystack(args.chars))
    base = Workspace(model=args.model, store=str(tmp / "unused"), threads=args.threads)
    tokens = base.model.tokenize(doc.read_text())
    base.embedder.embed_texts(["warm up"])
    rows = []
    for r in range(args.rounds):
        last = bare_prefill_rate(base, tokens, args.threads, all_logits=False)
        every = bare_prefill_rate(base, tokens, args.threads, all_logits=True)
        ingests = {}
        for choice in (args.surprise_at if r % 2 == 0 else list(reversed(args.surprise_at))):
            ws = Workspace(model=args.model, store=str(tmp / f"store-{r}-{choice}"), threads=args.threads)
            ws.__dict__.update(model=base.model, embedder=base.embedder)  # loaded once for every round
            ingests[choice] = ingest_rate(ws, doc, args.kv, choice)
        rows.append((last, every, {c: ingests[c][0] for c in args.surprise_at}))
        print(f"round {r + 1}: bare {last:.1f} tok/s, bare with every token's logits {every:.1f}", flush=True)
        for choice, (rate, in_decode, events) in ingests.items():
            print(f"  ingest, surprise at {choice}: {rate:.1f} tok/s ({rate / last:.2f}x / {rate / every:.2f}x; "
                  f"{in_decode:.0%} inside decode, {events} events)", flush=True)
    last, every = max(r[0] for r in rows), max(r[1] for r in rows)
    print(f"\n{len(tokens)} tokens, threads {args.threads or 'engine default'}, best of {args.rounds} rounds:")
    print("| pipeline | tokens/s | ingest / this |")
    print("|---|---|---|")
    for choice in args.surprise_at:
        print(f"| ingest ({args.kv} blocks, everything on), surprise at {choice} | "
              f"{max(r[2][choice] for r in rows):.0f} | |")
    print(f"| bare prefill, last token's logits | {last:.0f} | "
          + ", ".join(f"{max(r[2][c] for r in rows) / last:.3f}x ({c})" for c in args.surprise_at) + " |")
    print(f"| bare prefill, every token's logits | {every:.0f} | "
          + ", ".join(f"{max(r[2][c] for r in rows) / every:.3f}x ({c})" for c in args.surprise_at) + " |")


if __name__ == "__main__":
    main()
