"""What reading a question costs with flash attention on CPU, side by side in one run: the question decoded as one
batch after the same text, in kv mode's context and in the contexts `--layered` uses.

A layered answer decodes its question once with flash attention on (the probe, epi's query-capture callback armed);
llama.cpp's CPU flash kernel for a prompt of fewer than 64 tokens went one query row, head and cell at a time (2.4x
the softmax path for a 40-token question), which epi's rows kernel (native/llama_cpp/flash-decode.patch) replaces.
Every condition decodes the same question tokens after the same text (the Python standard library's sources):

- `kv`       kv mode's context (flash attention off): the sink and `--cells` tokens, all seen by every layer;
- `flash`    the same cells in a context with flash attention on, no per-layer mask, no eval callback;
- `layered`  a layered context holding a pool of 2 x `--cells` tokens in 256-token blocks, each layer seeing
             `--cells` of them (its own random choice), the query-capture callback armed: what the probe does.

Each round decodes each question length in every condition (interleaved, so load drifts hit all alike) and removes
it again; ms per question is the median over `--rounds` rounds, with the threads `epi ask` uses. Ratios are to `kv`.
To compare two builds of llama.cpp, run it twice with LD_LIBRARY_PATH pointing at each build's libggml-cpu.

    python bench/kv/question_pass.py [--cells 3072] [--lengths 16 40 63 96] [--rounds 7]
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
from layered_cost import BLOCK, hidden_per_layer, pooled  # noqa: E402
from long_run import concatenated_sources  # noqa: E402

from episodic_cli.engine.llama import layer_visibility  # noqa: E402
from episodic_cli.engine.kv.keys import rope_params  # noqa: E402
from episodic_cli.engine.prompt import sink_tokens  # noqa: E402
from episodic_cli.engine.answer.layered import FIRST_BLOCK_SEQ  # noqa: E402
from episodic_cli.engine.budgets import MAX_POOL  # noqa: E402
from episodic_cli.engine.llama.backend import LlamaSession, generation_threads, llama_cpp_version  # noqa: E402
from episodic_cli.engine.llama.query_capture import QueryCapture  # noqa: E402
from episodic_cli.engine.workspace import Workspace  # noqa: E402


def loaded_cpu_backend() -> str:
    """The path of the libggml-cpu this process runs (LD_LIBRARY_PATH may point at another build's)."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:  # not Linux
        return "unknown"
    return next((line.split()[-1] for line in maps if "libggml-cpu" in line), "unknown")


def timed_question(session: LlamaSession, start: int, question: np.ndarray, hidden: list[list[int]] | None,
                   capture: QueryCapture | None) -> float:
    """ms to decode `question` as one batch at `start` under `hidden` (per layer), the callback armed if given;
    the question is removed again afterwards."""
    ctx = session.ctx
    layer_visibility.clear(ctx)
    for layer, seqs in enumerate(hidden or []):
        layer_visibility.set_hidden_seqs(ctx, layer, seqs)
    if capture is not None:
        capture.arm()
    t0 = time.perf_counter()
    try:
        session.decode(question, start)
    finally:
        if capture is not None:
            capture.disarm()
    ms = (time.perf_counter() - t0) * 1000
    L.llama_memory_seq_rm(session.memory, 0, start, -1)
    layer_visibility.clear(ctx)
    return ms


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=3072, help="tokens of text every layer sees before the question")
    ap.add_argument("--lengths", type=int, nargs="+", default=[16, 40, 63, 96], help="question lengths in tokens")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path("bench/results/question_pass.json"))
    args = ap.parse_args(argv)
    if not layer_visibility.available():
        print("needs epi's patched llama.cpp (./install.sh)", file=sys.stderr)
        return 1
    t_start, load_start = time.perf_counter(), load_average()
    ws = Workspace()
    model = ws.model
    n_layer, window = model.info.n_layer, ws.answer_context
    text = model.tokenize(concatenated_sources(Path(sysconfig.get_paths()["stdlib"]), 200_000))
    sink = sink_tokens(model)
    s = len(sink)
    pool_tokens = 2 * args.cells // BLOCK * BLOCK
    if len(text) < pool_tokens + max(args.lengths):
        raise SystemExit(f"only {len(text)} tokens of text")
    question_text = text[pool_tokens:]
    threads = generation_threads()
    capture = QueryCapture(n_layer, int(L.llama_model_n_head(model.ptr)), rope_params(model).head_dim)

    kv = LlamaSession(model, n_ctx=window, n_threads=threads)
    kv.prefill(np.concatenate([sink, text[: args.cells]]), 0)
    flash = LlamaSession(model, n_ctx=window, n_threads=threads, flash_attn=True)
    flash.prefill(np.concatenate([sink, text[: args.cells]]), 0)
    layered = LlamaSession(model, n_ctx=window, n_threads=threads, n_seq_max=FIRST_BLOCK_SEQ + MAX_POOL,
                           flash_attn=True, eval_callback=capture.callback, eval_user_data=capture.user_data)
    n_blocks, layered_start = pooled(layered, sink, text[:pool_tokens], pool_tokens)
    hidden = hidden_per_layer(n_layer, n_blocks, args.cells // BLOCK, np.random.default_rng(7))
    conditions = {"kv": (kv, s + args.cells, None, None), "flash": (flash, s + args.cells, None, None),
                  "layered": (layered, layered_start, hidden, capture)}
    ms: dict[tuple[str, int], list[float]] = {}
    for name, (session, start, hid, cap) in conditions.items():  # warm-up: graphs built, buffers reserved
        for n in args.lengths:
            timed_question(session, start, question_text[:n], hid, cap)
    for r in range(args.rounds):
        for n in args.lengths:
            for name, (session, start, hid, cap) in conditions.items():
                ms.setdefault((name, n), []).append(timed_question(session, start, question_text[:n], hid, cap))
        print(f"round {r + 1}: " + ", ".join(f"{name}/{n} {v[-1]:.0f}" for (name, n), v in ms.items()), flush=True)
    rows = []
    for n in args.lengths:
        base = statistics.median(ms[("kv", n)])
        for name in conditions:
            med = statistics.median(ms[(name, n)])
            rows.append({"question_tokens": n, "condition": name, "ms": round(med, 1), "over_kv": round(med / base, 3),
                         "rounds_ms": [round(x, 1) for x in ms[(name, n)]]})
    print(f"\n`python bench/kv/question_pass.py {' '.join(argv if argv is not None else sys.argv[1:])}`: llama-cpp-python "
          f"{llama_cpp_version()} (CPU backend {loaded_cpu_backend()}), {threads} thread(s), load average "
          f"{load_start} -> {load_average()}, wall {time.perf_counter() - t_start:.0f} s; ms to decode the question "
          f"as one batch, median of {args.rounds} rounds; every layer sees {args.cells:,} tokens of text (layered: "
          f"of a {n_blocks * BLOCK:,}-token pool)\n")
    print("| question tokens | " + " | ".join(f"{c} ms (/ kv)" for c in conditions) + " |\n|---|"
          + "---|" * len(conditions))
    for n in args.lengths:
        cells = [r for r in rows if r["question_tokens"] == n]
        print(f"| {n} | " + " | ".join(f"{r['ms']:.0f} ({r['over_kv']:.2f}x)" for r in cells) + " |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "llama_cpp": llama_cpp_version(),
                                    "cpu_backend": loaded_cpu_backend(),
                                    "threads": threads, "load_start": load_start, "load_end": load_average(),
                                    "rows": rows}, indent=1), encoding="utf-8")
    for session in (kv, flash, layered):
        session.close()
    ws.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
