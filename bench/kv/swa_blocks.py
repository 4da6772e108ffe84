"""Can event blocks serve a model with interleaved sliding-window layers? Measured on the real Gemma 3 270M (18
layers: 15 window layers of 512 tokens, 3 global ones; as published, Q4_K_M, and expanded to F16 as epi expands
small answer models; a base model, so logits, not answers).

llama.cpp gives such a model an iSWA cache: the global layers' cells in one KV cache, the window layers' in another
that keeps only what the window still sees. A sequence's state blob (`llama_state_seq_get_data`) is the global part
then the window part, each laid out like a dense cache's; the window part holds only the cells within the window of
the sequence's last position (llama-kv-cache.cpp, state_write: SWA-masked cells are skipped).

Protocol (the same text everywhere; real prose: the Apache-2.0 license text the test suite reads):
- reference: O (other tokens) then the block text B then a probe P, prefilled in place in one sequence from 0;
- the block source: O + B prefilled from position D in another context; B's cells captured through the staging
  sequence (epi's capture_block, the raw blob: epi's codec reads dense blobs only);
- in a fresh context O is prefilled from 0, B's blob loaded at |O| (moved by -D: llama.cpp's K-shift on both
  caches, each layer with its own RoPE base), then P. Compared with the reference: the largest |logit difference|
  over P's rows, also relative to the reference logits' standard deviation (the unit tests/test_architectures.py
  states its tolerance in, RELOCATION_RTOL), and top-1 agreement.

Variants:
  floor        O + B + P prefilled in place from D instead of 0: how much positions alone move the logits
  a_full       the whole blob (global and window parts) loaded: does the window part round-trip?
  a_swa_small  the same with the source and answer contexts' window cache at its small size (swa_full off)
  c_no_window  global parts only, O's included (every window part emptied): what the window cells are worth
  b_redecode_R global parts only, then the last R tokens of B removed and decoded afresh as text (their window
               layers and everything else recomputed): "the global layers from the blocks, the window layers from
               the last W tokens decoded afresh". O comes from a blob too: llama.cpp checks a decode's position
               against the window cache's last cell, so a decode after text (O) whose window cells exist must
               follow them directly; with no window cell at all in the sequence any position is accepted
Block shapes: one block shorter than the window, one longer, and four short blocks loaded one after another (the
probe's window then spans several blocks' window parts).

The yardsticks: the dense tiny models of tests/test_architectures.py (random weights) under its protocol, with
two controls (the same text at other positions; K left unrotated after a move), and the real dense
Qwen2.5-Coder-0.5B-Instruct (when installed) under this one, in both forms.

    python bench/kv/swa_blocks.py [--gguf gemma-3-270m-q4_k_m.gguf] [--threads 2]

Writes bench/results/swa-blocks/gemma3-270m.json and dense-tiny.json.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import platform
import struct
import sys
import tempfile
import time
from pathlib import Path

import llama_cpp as L
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from episodic_cli.engine.kv import blocks as K  # noqa: E402
from episodic_cli.engine.llama.backend import LlamaModel, LlamaSession  # noqa: E402

OUT = ROOT / "bench" / "results" / "swa-blocks"
OTHER, PROBE, SHIFT = 600, 16, 1500  # tokens before the block(s), probe rows, D: where the source context starts
SHAPES = {"one_short": [256], "one_long": [1024], "four_short": [192, 192, 192, 192]}
N_CTX = 4096


# ------------------------------------------------------------------------------------------------ blob parts


def _kv_part_end(buf: bytes, off: int) -> tuple[int, int]:
    """(end offset, cell count) of one KV cache's part of a sequence blob (llama-kv-cache.cpp state_write)."""
    n_stream, = struct.unpack_from("<I", buf, off)
    off += 4
    cells = 0
    for _ in range(n_stream):
        n, = struct.unpack_from("<I", buf, off)
        off += 4
        if n == 0:
            continue
        cells += n
        for _ in range(n):  # pos, n_seq_id, seq ids (no cell extension for gemma3)
            _, n_seq = struct.unpack_from("<iI", buf, off)
            off += 8 + 4 * n_seq
        v_trans, n_layer = struct.unpack_from("<II", buf, off)
        off += 8
        for _ in range(n_layer):
            _, row = struct.unpack_from("<iQ", buf, off)
            off += 12 + n * row
        for _ in range(n_layer):
            if v_trans:
                _, el, n_embd = struct.unpack_from("<iII", buf, off)
                off += 12 + el * n_embd * n
            else:
                _, row = struct.unpack_from("<iQ", buf, off)
                off += 12 + n * row
    return off, cells


def split_iswa_blob(blob: bytes) -> tuple[bytes, bytes, int, int]:
    """(blob header + global part, window part, global cells, window cells) of an iSWA sequence blob."""
    head = 8  # io magic, source sequence
    base_end, base_cells = _kv_part_end(blob, head)
    swa_end, swa_cells = _kv_part_end(blob, base_end)
    if swa_end != len(blob):
        raise ValueError(f"blob is {len(blob)} bytes, its two parts {swa_end}")
    return blob[:base_end], blob[base_end:], base_cells, swa_cells


EMPTY_PART = struct.pack("<II", 1, 0)  # one stream, no cells: llama.cpp reads it as "nothing for this cache"


# ------------------------------------------------------------------------------------------------ sessions


@contextlib.contextmanager
def swa_full(flag: bool):
    """LlamaSession's contexts with llama.cpp's full-size window cache (its default) or the small one."""
    original = L.llama_context_default_params

    def params():
        p = original()
        p.swa_full = flag
        return p

    L.llama_context_default_params = params
    try:
        yield
    finally:
        L.llama_context_default_params = original


def logits(session, n: int) -> np.ndarray:
    ptr = ctypes.cast(L.llama_get_logits(session.ctx), ctypes.POINTER(ctypes.c_float))
    return np.ctypeslib.as_array(ptr, shape=(n, session.model.info.n_vocab)).copy()


def prefill_at(session, tokens: np.ndarray, pos0: int, seq: int = 0) -> int:
    for a in range(0, len(tokens), 256):
        session.decode(tokens[a:a + 256], pos0 + a, seq=seq)
    return pos0 + len(tokens)


def probe_logits(session, probe: np.ndarray, pos: int) -> np.ndarray:
    session.decode(probe, pos, np.ones(len(probe), dtype=np.int8))
    return logits(session, len(probe))


def compare(got: np.ndarray, ref: np.ndarray) -> dict:
    d = np.abs(got - ref)
    return {"max_abs_logit_diff": round(float(d.max()), 5), "mean_abs_logit_diff": round(float(d.mean()), 6),
            "max_diff_over_logit_std": round(float(d.max() / ref.std()), 5),
            "top1_agreement": round(float(np.mean(got.argmax(1) == ref.argmax(1))), 4)}


def load_raw(session, blob: bytes, delta: int) -> None:
    """Put a sequence blob into sequence 0, moved by `delta`, through the staging sequence. Not epi's load_block:
    that takes the block's first position from llama_memory_seq_pos_min, which an iSWA cache answers from its
    window cache alone (the last W cells of a longer block, or nothing when the window part is empty)."""
    data = np.frombuffer(blob, dtype=np.uint8)
    staging = K.STAGING_SEQ
    read = L.llama_state_seq_set_data(session.ctx, data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), len(blob),
                                      staging)
    if read != len(blob):
        raise RuntimeError(f"llama.cpp read {read} of {len(blob)} bytes")
    if delta:
        L.llama_memory_seq_add(session.memory, staging, -1, -1, delta)
    L.llama_memory_seq_cp(session.memory, staging, 0, -1, -1)
    L.llama_memory_seq_rm(session.memory, staging, -1, -1)


def run_shape(model, tokens: np.ndarray, lengths: list[int], threads: int, window: int) -> dict:
    """Every variant for one block shape (a dense model: the reference, the floor and the plain block move)."""
    n_blocks = sum(lengths)
    other, text = tokens[:OTHER], tokens[OTHER:OTHER + n_blocks]
    probe = tokens[OTHER + n_blocks:OTHER + n_blocks + PROBE]
    bounds = OTHER + np.cumsum([0] + lengths)
    end = OTHER + n_blocks
    out: dict = {"block_tokens": lengths, "other_tokens": OTHER, "probe_tokens": PROBE, "move": -SHIFT}

    def session():
        return LlamaSession(model, n_ctx=N_CTX, n_threads=threads, n_seq_max=2)

    s = session()
    try:
        t = time.perf_counter()
        prefill_at(s, np.concatenate([other, text]), 0)
        ref = probe_logits(s, probe, end)
        out["reference_seconds"] = round(time.perf_counter() - t, 2)
        out["reference_logit_std"] = round(float(ref.std()), 4)
        s.clear()
        prefill_at(s, np.concatenate([other, text]), SHIFT)
        out["floor"] = compare(probe_logits(s, probe, SHIFT + end), ref)
    finally:
        s.close()

    for full in ((True, False) if window else (True,)):
        with swa_full(full):
            src = session()
            try:
                prefill_at(src, np.concatenate([other, text]), SHIFT)
                blobs = [K.capture_block(src, 0, SHIFT + int(a), SHIFT + int(b))
                         for a, b in zip(bounds[:-1], bounds[1:])]
                other_blob = K.capture_block(src, 0, SHIFT, SHIFT + OTHER)
            finally:
                src.close()
            key = "a_full" if full else "a_swa_small"
            if window:
                parts = [split_iswa_blob(b) for b in blobs]
                out[f"{key}_blob_cells"] = {"global": [p[2] for p in parts], "window": [p[3] for p in parts]}
            dst = session()
            try:
                dst.clear()
                prefill_at(dst, other, 0)
                t = time.perf_counter()
                for blob in blobs:
                    load_raw(dst, blob, -SHIFT)
                row = compare(probe_logits(dst, probe, end), ref)
                row["load_and_probe_seconds"] = round(time.perf_counter() - t, 3)
                if window:  # what the cache holds now
                    back = split_iswa_blob(K.capture_block(dst, 0, OTHER, end + PROBE))
                    row["cells_after_load_and_probe"] = {"global": back[2], "window": back[3]}
                out[key] = row
                if not full or not window:
                    continue
                # Global layers only: O's and the blocks' window parts emptied. With no window cell left in sequence
                # 0, llama.cpp accepts a decode at any position (it checks positions against the window cache).
                global_only = [split_iswa_blob(other_blob)[0] + EMPTY_PART] + [p[0] + EMPTY_PART for p in parts]
                for r in [0] + sorted({window // 2, window, window + window // 2, 2 * window}):
                    if r > n_blocks:
                        continue
                    dst.clear()
                    t = time.perf_counter()
                    for blob in global_only:
                        load_raw(dst, blob, -SHIFT)
                    if r:
                        L.llama_memory_seq_rm(dst.memory, 0, end - r, -1)
                        prefill_at(dst, text[-r:], end - r)
                    row = compare(probe_logits(dst, probe, end), ref)
                    row["seconds"] = round(time.perf_counter() - t, 3)
                    out["c_no_window" if r == 0 else f"b_redecode_{r}"] = row
            finally:
                dst.close()
    return out


def dense_tiny(threads: int) -> dict:
    """tests/test_architectures.py's relocation check on each dense tiny model, three seeds, with two controls:
    positions only (the same text prefilled at another offset) and K left unrotated after the move."""
    import test_architectures as T
    from tiny_gguf import write_tiny_model

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for arch in T.DENSE:
            per_seed = []
            for seed in (7, 8, 9):
                model = LlamaModel(write_tiny_model(Path(tmp) / f"{arch}-{seed}.gguf", seed=seed, arch=arch))
                try:
                    moved, in_place, mover = T.relocation_logits(model)
                    row = compare(moved, in_place)
                    row["k_moved_by"] = mover
                    row["positions_only"] = compare(_positions_only(model, threads), in_place)
                    row["k_unrotated"] = compare(_unrotated(model), in_place)
                    per_seed.append(row)
                finally:
                    model.close()
            rows[arch] = {"seeds": [7, 8, 9], "runs": per_seed,
                          "max_diff_over_logit_std": max(r["max_diff_over_logit_std"] for r in per_seed),
                          "max_abs_logit_diff": max(r["max_abs_logit_diff"] for r in per_seed),
                          "top1_agreement": min(r["top1_agreement"] for r in per_seed)}
    return rows


def _tiny_parts(model):
    import test_architectures as T

    tokens = T.text_tokens(model, T.PREFIX + T.BLOCK + T.OTHER + T.PROBE)
    return T, tokens[:T.PREFIX], tokens[T.PREFIX:T.PREFIX + T.BLOCK], \
        tokens[T.PREFIX + T.BLOCK:T.PREFIX + T.BLOCK + T.OTHER], tokens[-T.PROBE:]


def _positions_only(model, threads: int) -> np.ndarray:
    """relocation_logits' in-place reference built 1000 positions further on (nothing moved, all decoded there)."""
    T, x, b, other, probe = _tiny_parts(model)
    s = LlamaSession(model, n_ctx=T.N_CTX + 1024, n_threads=threads, n_seq_max=2)
    try:
        prefill_at(s, other, 1000)
        s.decode(np.concatenate([x, b]), 1000 + T.OTHER - T.PREFIX, seq=K.STAGING_SEQ)
        L.llama_memory_seq_rm(s.memory, K.STAGING_SEQ, 1000 + T.OTHER - T.PREFIX, 1000 + T.OTHER)
        L.llama_memory_seq_cp(s.memory, K.STAGING_SEQ, 0, -1, -1)
        L.llama_memory_seq_rm(s.memory, K.STAGING_SEQ, -1, -1)
        return probe_logits(s, probe, 1000 + T.OTHER + T.BLOCK)
    finally:
        s.close()


def _unrotated(model) -> np.ndarray:
    """relocation_logits' moved path with K left at the positions it was computed at (a wrong move)."""
    T, x, b, other, probe = _tiny_parts(model)
    s = LlamaSession(model, n_ctx=T.N_CTX, n_threads=1, n_seq_max=2)
    try:
        s.prefill(np.concatenate([x, b]))
        block = K.parse_state_blob(K.capture_block(s, 0, T.PREFIX, T.PREFIX + T.BLOCK))
        block = K.ParsedBlock(block.positions + (T.OTHER - T.PREFIX), block.k.copy(), block.v.copy(),
                              block.v_trans, block.src_seq, block.cell_seq)
        s.clear()
        s.prefill(other)
        K.load_block(s, block, 0, T.OTHER)
        return probe_logits(s, probe, T.OTHER + T.BLOCK)
    finally:
        s.close()


def expand_f16(source: Path, folder: Path) -> Path:
    """The GGUF with every matrix F16 (llama.cpp's quantizer, as epi expands small answer models), made once."""
    target = folder / f"{source.stem}.f16.gguf"
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        params = L.llama_model_quantize_default_params()
        params.ftype = L.LLAMA_FTYPE_MOSTLY_F16
        params.allow_requantize = True
        tmp = target.with_suffix(".tmp")
        if L.llama_model_quantize(str(source).encode(), str(tmp).encode(), ctypes.byref(params)) != 0:
            raise RuntimeError(f"could not expand {source} to F16")
        tmp.replace(target)
    return target


def measure_model(path: Path, form: str, tokens_of, threads: int, shapes: dict) -> dict:
    model = LlamaModel(path)
    try:
        tokens = tokens_of(model)
        window = int(L.llama_model_n_swa(model.ptr))
        result = {"model": path.name, "form": form, "architecture": model.info.architecture,
                  "n_layer": model.info.n_layer, "sliding_window": window,
                  "block_reuse_reason": model.block_reuse_reason(), "shapes": {}}
        for name, lengths in shapes.items():
            assert len(tokens) >= OTHER + sum(lengths) + PROBE
            t = time.perf_counter()
            result["shapes"][name] = run_shape(model, tokens, lengths, threads, window)
            print(f"{path.name} {name} {time.perf_counter() - t:.0f}s", json.dumps(result["shapes"][name]), flush=True)
        return result
    finally:
        model.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", type=Path, help="the Gemma 3 270M GGUF (default: assembled from its packages)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-dense", action="store_true", help="leave out the dense models (tiny and Qwen 0.5B)")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    machine = {"machine": platform.machine(), "python": platform.python_version(), "llama_cpp": L.__version__,
               "threads": args.threads}
    from conftest import license_text
    from gemma_270m import assemble

    def tokens_of(model):
        return model.tokenize(license_text())

    work = Path(tempfile.gettempdir()) / "epi-bench-swa-blocks"
    if not args.skip_dense:
        dense = {"protocol": "tests/test_architectures.py relocation_logits (f16 payload, block of 96 after a "
                             "24-token prefix, moved from 24 to 200, probe of 8), seeds 7, 8, 9; random weights",
                 **machine, "architectures": dense_tiny(args.threads)}
        (OUT / "dense-tiny.json").write_text(json.dumps(dense, indent=1) + "\n")
        for arch, row in dense["architectures"].items():
            print(f"{arch:8s} max |d| {row['max_abs_logit_diff']:.4f}  /std {row['max_diff_over_logit_std']:.4f}  "
                  f"top1 {row['top1_agreement']:.2f}", flush=True)

    gguf = args.gguf or assemble(work)
    runs = [(gguf, "Q4_K_M"), (expand_f16(gguf, work), "F16")]
    if not args.skip_dense:
        from episodic_cli.engine.llama.bundled import QWEN_0_5B, assemble as assemble_bundled, is_installed

        if is_installed(QWEN_0_5B):  # a real dense model under the same protocol: the yardstick
            qwen = assemble_bundled(QWEN_0_5B)
            runs += [(qwen, "Q4_K_M"), (expand_f16(qwen, work), "F16")]
    results = [measure_model(path, form, tokens_of, args.threads, SHAPES) for path, form in runs]
    (OUT / "gemma3-270m.json").write_text(json.dumps(
        {**machine, "note": "Gemma 3 270M is a base model with real weights: logits for the check, not answers; "
                            "Qwen2.5-Coder-0.5B-Instruct (dense) runs the same protocol as the yardstick",
         "runs": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
