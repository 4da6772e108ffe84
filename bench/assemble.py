"""What assembling a pool of KV blocks costs, with and without the SIMD paths and the native K move, side by side.

Synthetic blocks shaped like the bundled model's (30 layers, K/V rows of 192 values) add up to a pool of `--cells`
cells (5,500: a typical `--layered` pool; kv mode's whole blocks are ~2,000), in blocks of `--block` cells, as the
tier stores them (f16, q8_0, q4_0). Each condition turns every block into llama.cpp's state blob
(`kv_memory.state_blob_from_payload`, what loading a block costs before llama.cpp copies it in), best of `--repeat`:

- scalar / simd        the AVX2/F16C/FMA paths off (`native.set_simd(False)`) or on (native/src/rows_f16.c);
- kept / moved         positions kept, or moved with K rotated natively (native/src/rope_shift.c), which replaced
                       llama.cpp's K-shift (a RoPE pass over every cell of the cache inside the next decode).

Ratios are taken within the run. Results: docs/assemble.json.

    python bench/assemble.py [--cells 5500] [--block 400] [--repeat 15] [--out docs/assemble.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from episodic_cli import native
from episodic_cli.engine import kv_memory as K

N_LAYER, N_EMBD = 30, 192
MOVE = native.RopeShift(delta=0, head_dim=64, n_rot=64, neox=False, freq_base=100000.0, freq_scale=1.0,
                        fused=native.rope_shift_fused_default())


def pool(cells: int, block: int, kind: str) -> list[bytes]:
    rng = np.random.default_rng(0)
    out, first = [], 100
    while cells > 0:
        n = min(block, cells)
        k, v = (rng.standard_normal((2, N_LAYER, n, N_EMBD)) * 2).astype(np.float16)
        out.append(K.encode_block(K.ParsedBlock(np.arange(first, first + n, dtype=np.int32), k, v, False), kind))
        first, cells = first + n, cells - n
    return out


def assemble_s(payloads: list[bytes], moved: bool, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for i, p in enumerate(payloads):
            K.state_blob_from_payload(p, v_trans=False, move_to=5000 + 500 * i if moved else None,
                                      rope=MOVE if moved else None)
        best = min(best, time.perf_counter() - t)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=5500)
    ap.add_argument("--block", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--out", type=Path, default=Path("docs/assemble.json"))
    args = ap.parse_args(argv)
    if not native.simd_usable():
        print("this CPU has no AVX2/F16C/FMA: only the scalar paths run here; nothing to compare")
        return 1
    rows = []
    print(f"{args.cells} cells in blocks of {args.block}, best of {args.repeat} (ms)")
    print("| kind | scalar kept | scalar moved | simd kept | simd moved | simd/scalar kept | simd/scalar moved "
          "| move cost, simd |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for kind in K.KINDS:
            payloads = pool(args.cells, args.block, kind)
            t = {}
            for simd in (False, True):
                native.set_simd(simd)
                for moved in (False, True):
                    t[simd, moved] = assemble_s(payloads, moved, args.repeat)
            rows.append({"kind": kind, "cells": args.cells, "block": args.block,
                         **{f"{'simd' if s else 'scalar'}_{'moved' if m else 'kept'}_s": v for (s, m), v in t.items()}})
            ms = {key: f"{v * 1e3:.1f}" for key, v in t.items()}
            print(f"| {kind} | {ms[False, False]} | {ms[False, True]} | {ms[True, False]} | {ms[True, True]} "
                  f"| {t[True, False] / t[False, False]:.2f}x | {t[True, True] / t[False, True]:.2f}x "
                  f"| +{(t[True, True] - t[True, False]) * 1e3:.1f} ms |")
    finally:
        native.set_simd(True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": platform.processor() or platform.machine(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
