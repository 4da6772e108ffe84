"""What reading and assembling a pool of KV blocks costs: block files read or mapped, the assembler with and without
its SIMD paths and the native K move, side by side.

Synthetic blocks shaped like the bundled model's (30 layers, K/V rows of 192 values) add up to a pool of `--cells`
cells (5,500: a typical `--layered` pool; kv mode's whole blocks are ~2,000), in blocks of `--block` cells, as the
tier stores them (f16, q8_0, q4_0). Each condition turns every block into llama.cpp's state blob
(engine/kv/blocks.py's `state_blob_from_payload`, what loading a block costs before llama.cpp copies it in),
best of `--repeat`:

- scalar / simd        the AVX2/F16C/FMA paths off (`native.set_simd(False)`) or on (native/src/rows_f16.c);
- kept / moved         positions kept, or moved with K rotated natively (native/src/rope_shift.c), which replaced
                       llama.cpp's K-shift (a RoPE pass over every cell of the cache inside the next decode).

Reading: the same pool written as tier block files (`write_block_file`, in a temporary folder, so in the page
cache as a tier the answers use is), then read back with every block kept until the pool is read, as an answer
keeps them: `copied` reads each file into memory and checks its crc32 as `read_block_file` did before 2026-11-24,
`mapped` is `read_block_file` now (the file mapped read-only, then checked with native.crc32).

Checksum: the pool's payloads through zlib.crc32 and native.crc32 (the same values; carry-less multiplies).

Ratios are taken within the run. Results: bench/results/assemble.json.

    python bench/kv/assemble.py [--cells 5500] [--block 400] [--repeat 15] [--out bench/results/assemble.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from episodic_cli import native
from episodic_cli.engine.kv import blocks as K
from episodic_cli.store.kv_tier.block_file import BlockType, read_block_file, write_block_file

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


def read_copied(path: Path) -> np.ndarray:
    with open(path, "rb") as f:
        raw = f.read()
    zlib.crc32(raw)
    return np.frombuffer(raw, dtype=np.uint8)


def read_s(payloads: list[bytes], kind: str, repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        files = []
        for i, p in enumerate(payloads):
            key = i.to_bytes(16, "little")
            files.append((Path(folder) / f"{i}.ekvb", key))
            write_block_file(files[-1][0], key, BlockType[kind.upper()], 0, p, None)
        times: dict[str, list[float]] = {"copied": [], "mapped": []}
        for _ in range(repeat):
            for way in times:
                t = time.perf_counter()
                kept = [read_copied(f) if way == "copied" else read_block_file(f, key) for f, key in files]
                times[way].append(time.perf_counter() - t)
                del kept
    # the first pass is what a fresh `epi ask` pays (every copy lands in new, zero-filled pages); later ones reuse
    # the memory the allocator got back
    return {f"{way}_{which}": (ts[0] if which == "first" else min(ts)) for way, ts in times.items()
            for which in ("first", "best")}


def checksum_s(payloads: list[bytes], repeat: int) -> dict[str, float]:
    """Best time to checksum the pool's payloads: zlib's crc32, and native.crc32 (the same values, PCLMULQDQ)."""
    out = {}
    for name, crc in (("zlib", zlib.crc32), ("native", native.crc32)):
        best = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            for p in payloads:
                crc(p)
            best = min(best, time.perf_counter() - t)
        out[name] = best
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=5500)
    ap.add_argument("--block", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--out", type=Path, default=Path("bench/results/assemble.json"))
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
    reads = []
    print()
    print("| kind | MB | copied, first pass (ms) | mapped, first pass | copied, best | mapped, best "
          "| mapped / copied, first | best |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in K.KINDS:
        payloads = pool(args.cells, args.block, kind)
        t = read_s(payloads, kind, args.repeat)
        mb = sum(len(p) for p in payloads) / 1e6
        reads.append({"kind": kind, "mb": round(mb, 1), **{f"{key}_s": v for key, v in t.items()}})
        print(f"| {kind} | {mb:.1f} | {t['copied_first'] * 1e3:.1f} | {t['mapped_first'] * 1e3:.1f} "
              f"| {t['copied_best'] * 1e3:.1f} | {t['mapped_best'] * 1e3:.1f} "
              f"| {t['mapped_first'] / t['copied_first']:.2f}x | {t['mapped_best'] / t['copied_best']:.2f}x |")
    checks = []
    print()
    print("| kind | MB | zlib.crc32 (ms) | native.crc32 | native / zlib |")
    print("|---|---|---|---|---|")
    for kind in K.KINDS:
        payloads = pool(args.cells, args.block, kind)
        t = checksum_s(payloads, args.repeat)
        mb = sum(len(p) for p in payloads) / 1e6
        checks.append({"kind": kind, "mb": round(mb, 1), **{f"{key}_s": v for key, v in t.items()}})
        print(f"| {kind} | {mb:.1f} | {t['zlib'] * 1e3:.1f} | {t['native'] * 1e3:.1f} "
              f"| {t['native'] / t['zlib']:.2f}x |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": platform.processor() or platform.machine(), "assemble": rows,
                                    "read": reads, "checksum": checks}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
