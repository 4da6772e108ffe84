"""What the layered context's eval callback costs a decoded token: none, epi's C gate, a plain ctypes callback.

ggml calls a context's cb_eval for every graph node of every decode (~1,000 calls a token with the bundled model).
Three contexts with flash attention, the same 3,000 tokens of prose, one decode thread, decoding the same 32 tokens
one at a time, interleaved round by round:
- `none`     no callback (kv mode's contexts);
- `gated`    the query-capture callback behind epi's C gate, disarmed (what a layered context carries while it
             generates: engine/llama/query_capture.py, native/src/eval_gate.c);
- `ctypes`   the same Python reader installed directly, as epi did before the gate.
ms per token, median of `--rounds` rounds; the ratios are to `none`.

    python bench/kv/eval_callback_cost.py [--rounds 12] [--cells 3000]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import llama_cpp as L
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "answers"))
from eval import load_average  # noqa: E402

from episodic_cli.engine.kv.keys import rope_params  # noqa: E402
from episodic_cli.engine.llama.backend import LlamaSession  # noqa: E402
from episodic_cli.engine.llama.query_capture import QueryCapture  # noqa: E402
from episodic_cli.engine.workspace import Workspace  # noqa: E402

TOKENS = 32


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--cells", type=int, default=3000, help="tokens in the context before decoding")
    args = ap.parse_args(argv)
    load_start = load_average()
    model = Workspace().model
    capture = QueryCapture(model.info.n_layer, int(L.llama_model_n_head(model.ptr)), rope_params(model).head_dim)
    text = model.tokenize("The harbour master counted the nets before the storm arrived, as the council had "
                          "ordered. " * (args.cells // 10))[: args.cells]
    n_ctx = args.cells + 2 * TOKENS
    sessions = {
        "none": LlamaSession(model, n_ctx=n_ctx, n_threads=1, flash_attn=True),
        "gated": LlamaSession(model, n_ctx=n_ctx, n_threads=1, flash_attn=True, eval_callback=capture.callback,
                              eval_user_data=capture.user_data),
        "ctypes": LlamaSession(model, n_ctx=n_ctx, n_threads=1, flash_attn=True,
                               eval_callback=capture._reader),  # the reader without its gate
    }
    ms: dict[str, list[float]] = {name: [] for name in sessions}
    for session in sessions.values():
        session.prefill(text, 0)
    for r in range(args.rounds + 1):  # round 0 warms up
        for name, session in sessions.items():
            t0 = time.perf_counter()
            for i in range(TOKENS):
                session.decode(text[i : i + 1], args.cells + i)
            if r:
                ms[name].append((time.perf_counter() - t0) * 1000 / TOKENS)
            L.llama_memory_seq_rm(session.memory, 0, args.cells, -1)
    base = statistics.median(ms["none"])
    print(f"`python bench/kv/eval_callback_cost.py {' '.join(argv if argv is not None else sys.argv[1:])}`: "
          f"{args.cells} cells, 1 thread, load {load_start} -> {load_average()}; ms per token, median of "
          f"{args.rounds} rounds of {TOKENS}\n")
    print("| callback | ms/token | / none | rounds |\n|---|---|---|---|")
    for name, values in ms.items():
        print(f"| {name} | {statistics.median(values):.2f} | {statistics.median(values) / base:.3f}x | "
              f"{' '.join(f'{v:.1f}' for v in values)} |")
    for session in sessions.values():
        session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
