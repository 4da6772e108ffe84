"""What per-layer block selection costs a decoded token at the same visible budget, side by side in one run.

bench/kv/layered.py times whole answers, where kv mode reads whatever retrieval returned (1.5-3k tokens) and a layered
answer shows each layer up to 3,072: not the same budget. Here every condition decodes the same tokens after the
same kind of text (the Python standard library's sources, real text nobody on the team wrote), and the layered ones
show each layer exactly `--visible` tokens:

- `kv`             kv mode's context (flash attention off): the sink and `--visible` tokens, all seen by every layer;
- `flash`          the same cells in a context with flash attention on, no per-layer mask, no eval callback;
- `flash+callback` the same, with the disarmed query-capture callback a layered context carries (ggml calls it for
                   every graph node; engine/llama/query_capture.py);
The last three run as `epi ask --layered` runs them, callback included:
- `pool-whole`     a layered context holding a pool of `--pool` tokens in 256-token blocks, each in a sequence of
                   its own, every layer seeing all of it (no mask);
- `layered`        the same pool, each layer seeing `--visible` tokens of it (its own random choice of blocks);
- `layered-wide`   a pool of `--wide` answer contexts' room in lanes that share positions (engine/answer/layered.py), each
                   layer seeing `--visible` tokens of it.

Each round decodes `--tokens` tokens one at a time in every condition (interleaved, so load drifts hit all alike)
and removes them again; ms per token is the median over `--rounds` rounds, with the decode threads `epi ask` uses.
Ratios are to `kv`.

    python bench/kv/layered_cost.py [--visible 3072] [--pool 6144] [--wide 3] [--rounds 5] [--tokens 32]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import sysconfig
import time
from pathlib import Path

import llama_cpp as L
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "answers"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scale"))
from eval import load_average  # noqa: E402
from long_run import concatenated_sources  # noqa: E402

from episodic_cli.engine.llama import layer_visibility  # noqa: E402
from episodic_cli.engine.kv.keys import rope_params  # noqa: E402
from episodic_cli.engine.kv.blocks import STAGING_SEQ  # noqa: E402
from episodic_cli.engine.prompt import sink_tokens  # noqa: E402
from episodic_cli.engine.answer.layered import FIRST_BLOCK_SEQ, lane_places  # noqa: E402
from episodic_cli.engine.budgets import MAX_POOL  # noqa: E402
from episodic_cli.engine.llama.backend import INGEST_BATCH, LlamaSession, generation_threads  # noqa: E402
from episodic_cli.engine.llama.query_capture import QueryCapture  # noqa: E402
from episodic_cli.engine.workspace import Workspace  # noqa: E402

BLOCK = 256  # tokens per pool block (about an event)


class Condition:
    """A context prepared for one condition: its session, where decoding starts, and its per-layer hidden blocks."""

    def __init__(self, name: str, session: LlamaSession, start: int, hidden: list[list[int]] | None = None):
        self.name, self.session, self.start, self.hidden = name, session, start, hidden
        self.ms: list[float] = []

    def round(self, tokens: np.ndarray) -> None:
        """Decode `tokens` one at a time after the prompt (under this condition's visibility), then remove them."""
        ctx = self.session.ctx
        layer_visibility.clear(ctx)
        for layer, seqs in enumerate(self.hidden or []):
            layer_visibility.set_hidden_seqs(ctx, layer, seqs)
        t0 = time.perf_counter()
        for i, token in enumerate(tokens):
            self.session.decode(np.array([token]), self.start + i)
        self.ms.append((time.perf_counter() - t0) * 1000 / len(tokens))
        L.llama_memory_seq_rm(self.session.memory, 0, self.start, -1)
        layer_visibility.clear(ctx)


def pooled(session: LlamaSession, sink: np.ndarray, text: np.ndarray, span: int) -> tuple[int, int]:
    """Put `text` into the session as BLOCK-token blocks, each in its own sequence and in sequence 0, in lanes of
    `span` positions behind the sink (lane_places); returns (blocks, the position after the lanes)."""
    memory, s = session.memory, len(sink)
    session.prefill(sink, 0)
    sizes = [BLOCK] * (len(text) // BLOCK)
    places = lane_places(sizes, s, span)
    starts = [i for i in range(len(sizes)) if i == 0 or places[i] != places[i - 1] + BLOCK]  # first block of each lane
    for lane, first in enumerate(starts):
        last = starts[lane + 1] if lane + 1 < len(starts) else len(sizes)
        L.llama_memory_seq_cp(memory, 0, STAGING_SEQ, 0, s)  # the lane is computed behind the sink, then moved
        lane = text[first * BLOCK : last * BLOCK]
        for a in range(0, len(lane), INGEST_BATCH):
            session.decode(lane[a : a + INGEST_BATCH], s + a, seq=STAGING_SEQ)
        if places[first] != s:
            L.llama_memory_seq_add(memory, STAGING_SEQ, s, -1, places[first] - s)
        for i in range(first, last):
            L.llama_memory_seq_cp(memory, STAGING_SEQ, FIRST_BLOCK_SEQ + i, places[i], places[i] + BLOCK)
        L.llama_memory_seq_rm(memory, STAGING_SEQ, -1, -1)
    for i in range(len(sizes)):
        L.llama_memory_seq_cp(memory, FIRST_BLOCK_SEQ + i, 0, -1, -1)
    return len(sizes), s + span


def hidden_per_layer(n_layer: int, n_blocks: int, visible_blocks: int, rng: np.random.Generator) -> list[list[int]]:
    return [[FIRST_BLOCK_SEQ + i for i in np.sort(rng.permutation(n_blocks)[visible_blocks:])] for _ in range(n_layer)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--visible", type=int, default=3072, help="tokens every layer sees (kv mode's cap)")
    ap.add_argument("--pool", type=int, default=6144, help="tokens of the layered pool (today's pools: 5-7k)")
    ap.add_argument("--wide", type=int, default=3, help="layered-wide's pool, in answer contexts' room")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=32, help="tokens decoded per round and condition")
    ap.add_argument("--out", type=Path, default=Path("bench/results/layered_cost.json"))
    args = ap.parse_args(argv)
    if not layer_visibility.available():
        print("needs epi's patched llama.cpp (./install.sh)", file=sys.stderr)
        return 1
    t_start, load_start = time.perf_counter(), load_average()
    ws = Workspace()
    model = ws.model
    n_layer, window, room = model.info.n_layer, ws.answer_context, ws.room()
    wide = args.wide * room
    text = model.tokenize(concatenated_sources(Path(sysconfig.get_paths()["stdlib"]), 400_000))
    if len(text) < wide:
        raise SystemExit(f"only {len(text)} tokens of text for a pool of {wide}")
    sink = sink_tokens(model)
    s = len(sink)
    threads = generation_threads()
    rng = np.random.default_rng(7)
    visible_blocks = args.visible // BLOCK

    # never armed: what a layered context carries while it generates (LayeredAnswerer builds it the same way)
    capture = QueryCapture(n_layer, int(L.llama_model_n_head(model.ptr)), rope_params(model).head_dim)

    def layered_session(cells: int, callback: bool = True) -> LlamaSession:
        return LlamaSession(model, n_ctx=cells, n_threads=threads, n_seq_max=FIRST_BLOCK_SEQ + MAX_POOL,
                            flash_attn=True, eval_callback=capture.callback if callback else None,
                            eval_user_data=capture.user_data)

    conditions = []
    kv = LlamaSession(model, n_ctx=window, n_threads=threads)
    kv.prefill(np.concatenate([sink, text[: args.visible]]), 0)
    conditions.append(Condition("kv", kv, s + args.visible))
    flash = layered_session(window, callback=False)
    flash.prefill(np.concatenate([sink, text[: args.visible]]), 0)
    conditions.append(Condition("flash", flash, s + args.visible))
    watched = layered_session(window)
    watched.prefill(np.concatenate([sink, text[: args.visible]]), 0)
    conditions.append(Condition("flash+callback", watched, s + args.visible))
    pool = layered_session(window)
    n_blocks, start = pooled(pool, sink, text[: args.pool], args.pool // BLOCK * BLOCK)
    conditions.append(Condition("pool-whole", pool, start))
    conditions.append(Condition("layered", pool, start, hidden_per_layer(n_layer, n_blocks, visible_blocks, rng)))
    widened = layered_session(window + wide)
    n_wide, start = pooled(widened, sink, text[:wide], room // BLOCK * BLOCK)
    conditions.append(Condition("layered-wide", widened, start, hidden_per_layer(n_layer, n_wide, visible_blocks, rng)))
    probe = model.tokenize(" The function returns the value of the argument that was passed to it, and then")
    tokens = np.resize(probe, args.tokens)
    for c in conditions:  # warm-up: graphs built, buffers reserved
        c.round(tokens[:4])
        c.ms.clear()
    for r in range(args.rounds):
        for c in conditions:
            c.round(tokens)
        print(f"round {r + 1}: " + ", ".join(f"{c.name} {c.ms[-1]:.1f}" for c in conditions), flush=True)
    base = statistics.median(conditions[0].ms)
    rows = [{"condition": c.name, "ms_per_token": round(statistics.median(c.ms), 2),
             "over_kv": round(statistics.median(c.ms) / base, 3), "rounds_ms": [round(x, 2) for x in c.ms]}
            for c in conditions]
    cells = {"kv": s + args.visible, "flash": s + args.visible, "flash+callback": s + args.visible,
             "pool-whole": s + n_blocks * BLOCK,
             "layered": s + n_blocks * BLOCK, "layered-wide": s + n_wide * BLOCK}
    seen = {"kv": args.visible, "flash": args.visible, "flash+callback": args.visible, "pool-whole": n_blocks * BLOCK,
            "layered": visible_blocks * BLOCK, "layered-wide": visible_blocks * BLOCK}
    print(f"\n`python bench/kv/layered_cost.py {' '.join(argv if argv is not None else sys.argv[1:])}`: {threads} decode "
          f"thread(s), load average {load_start} -> {load_average()}, wall {time.perf_counter() - t_start:.0f} s; "
          f"ms per decoded token, median of {args.rounds} rounds of {args.tokens} tokens\n")
    print("| condition | cells | pool tokens each layer sees | ms/token | / kv |\n|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['condition']} | {cells[row['condition']]:,} | {seen[row['condition']]:,} | "
              f"{row['ms_per_token']:.2f} | {row['over_kv']:.2f}x |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "threads": threads,
                                    "load_start": load_start, "load_end": load_average(), "cells": cells,
                                    "visible": seen, "rows": rows}, indent=1), encoding="utf-8")
    for session in (kv, flash, watched, pool, widened):
        session.close()
    ws.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
