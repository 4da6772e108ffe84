"""Model size: the first token from stored blocks against re-reading the same text, 0.5B to 8B shapes, in one run.

For each model shape, side by side in one run, every measurement in a fresh process under `/usr/bin/time -v` (peak
RSS, "Maximum resident set size", from the OS):

- (c) **block preparation** (`prep`): epi's ingest pass over `--tokens` tokens of real prose (CPython's pydoc_data
  topics, PSF License) through epi's own LlamaSession.surprise_pass: the answer sink first, 512-token batches in
  the ingest's sliding window (ingest_context, SegmentParams().local), logits at the clean cuts only (the default
  surprise_at), each ~`--block-tokens` block captured as soon as it is decoded (capture_block), encoded to q8_0
  (encode_block, epi's default block type) and written to a file of its own. Tokens per second of that pass.
  Segmentation, representative keys, the embedder and the store are not in it (bench/ingest/ingest_throughput.py has
  their share with the small models).
- (d) **KV bytes per token**: the encoded q8_0 payloads' bytes over their tokens (header and positions included),
  and the same blocks encoded f16.
- (a) **first token, re-reading as text** (`text`): an empty answer context (epi's: min(8192, trained context),
  unified F16 KV, `SPAN_SEQUENCES` sequences), the prompt [sink: chat template + system rules + "Sources:"] + the
  same prose tokens + [question + assistant header] prefilled in 512-token batches, then the greedy first token.
- (b) **first token from blocks** (`blocks`): the same context, empty; the sink loaded from its f16 block file (as
  kv mode loads it from the cache directory), each block read from disk (dropped from the page cache first with
  posix_fadvise), assembled straight into llama.cpp's state blob with its K rotated to its new place
  (state_blob_from_payload with kv mode's k_shift; where the model's RoPE is not plain, Llama 3.1's frequency
  factors, llama.cpp's K-shift does it inside the next decode) and loaded (load_block), then the question decoded
  and the greedy first token: exactly kv mode's path (engine/answer/kv_mode.py) without the store.
- (e) peak RSS of the (a) and (b) processes, and the model file's size; with each, what epi predicts
  (engine/llama/model_facts.py: `read_model_facts(path).memory_needed(n_ctx)`) when that module is importable.

Model load and the first decode (which pages the mapped weights in) are timed apart and left out of (a) and (b):
both pay them alike. Threads and context parameters are epi's (LlamaSession, default_threads) unless `--threads`.

The shapes: Qwen2.5-0.5B and 1.5B are the real files epi installs (qwen-0.5b, qwen-1.5b: Qwen2.5-Coder-*-Instruct
Q4_K_M, as epi prepares them: the 0.5B expanded to F16, models.prepare_model). Qwen2.5-7B and Llama-3.1-8B are
**random-weight GGUFs in those models' exact tensor shapes**, written here as Q8_0 (uniform random int8 values, a
scale giving a standard deviation of 0.02) and quantized to Q4_K_M by llama.cpp's quantizer (llama_model_quantize),
cached under `--dir` by shape. Their tokenizer is copied from a real file: Qwen2.5's (from the qwen-0.5b GGUF,
padded to 152,064 entries) for the 7B, SmolLM2's (the bundled model, 49,152 entries padded to 128,256) for the
Llama shape, with its ChatML template; Llama 3.1's rope_freqs tensor (its long-context frequency factors) is
included, as real Llama 3.1 GGUFs carry it. Random weights give true timings (the same tensors, the same kernels,
the same number of tokens), not answers.

    python bench/models/model_sizes.py [--models qwen2.5-0.5b qwen2.5-1.5b qwen2.5-7b llama3.1-8b] [--tokens 3000]
        [--threads N] [--repeat 2] [--big-repeat 1] [--dir /work/bigmodels] [--out FILE]
    python bench/models/model_sizes.py --add-predictions bench/results/model-sizes/2026-12-07.json   # fill in epi's prediction
"""
from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import json
import math
import mmap
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results" / "model-sizes"
QUESTION = "What do these passages say about the evaluation order of expressions?"
BIG_PARAMS = 3e9
SCRATCH = Path("/work/bigmodels/work")  # the workers' result files (main sets it from --dir)  # models from this size on run (a) --big-repeat times


# ---------------------------------------------------------------------------------------------------- shapes


@dataclass(frozen=True)
class Shape:
    name: str
    label: str
    real: str | None = None          # epi's installed model name; None: random weights in this shape
    arch: str = ""
    n_layer: int = 0
    n_embd: int = 0
    n_head: int = 0
    n_head_kv: int = 0
    n_ff: int = 0
    n_vocab: int = 0
    rope_base: float = 10000.0
    rms_eps: float = 1e-6
    ctx_train: int = 0
    qkv_bias: bool = False
    llama31_rope_freqs: bool = False
    tokenizer_from: str = ""         # "qwen-0.5b" or "smollm2"

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


SHAPES = {s.name: s for s in (
    Shape("qwen2.5-0.5b", "Qwen2.5-0.5B", real="qwen-0.5b"),
    Shape("qwen2.5-1.5b", "Qwen2.5-1.5B", real="qwen-1.5b"),
    Shape("qwen2.5-7b", "Qwen2.5-7B shape", arch="qwen2", n_layer=28, n_embd=3584, n_head=28, n_head_kv=4,
          n_ff=18944, n_vocab=152064, rope_base=1e6, rms_eps=1e-6, ctx_train=32768, qkv_bias=True,
          tokenizer_from="qwen-0.5b"),
    Shape("llama3.1-8b", "Llama-3.1-8B shape", arch="llama", n_layer=32, n_embd=4096, n_head=32, n_head_kv=8,
          n_ff=14336, n_vocab=128256, rope_base=5e5, rms_eps=1e-5, ctx_train=131072, llama31_rope_freqs=True,
          tokenizer_from="smollm2"),
)}


def haystack(n_chars: int) -> str:
    """Real prose: CPython's pydoc_data topics (PSF License), as bench/ingest/ingest_throughput.py and bench/models/gpu.py read."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))[:n_chars]


# ---------------------------------------------------------------------------------------------- GGUF in and out
# GGUF v3 (ggml docs/gguf.md), little-endian; the layout tests/tiny_gguf.py writes too. Metadata values are kept as
# (type, value) so that a copied tokenizer is written back exactly as it was read.

_U8, _I8, _U16, _I16, _U32, _I32, _F32, _BOOL, _STR, _ARR, _U64, _I64, _F64 = range(13)
_SCALAR = {_U8: "<B", _I8: "<b", _U16: "<H", _I16: "<h", _U32: "<I", _I32: "<i", _F32: "<f", _BOOL: "<?",
           _U64: "<Q", _I64: "<q", _F64: "<d"}
_GGML_F32, _GGML_Q8_0 = 0, 8
ALIGNMENT = 32
TOKEN_UNUSED = 5  # gguf-py TokenType.UNUSED: what convert_hf_to_gguf pads a vocabulary with


def _read_metadata(path: Path) -> dict[str, tuple[int, object]]:
    """Every metadata pair of a GGUF file: key -> (type, value); an array is (element type, list)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        pos = 0

        def take(fmt: str):
            nonlocal pos
            v = struct.unpack_from(fmt, m, pos)[0]
            pos += struct.calcsize(fmt)
            return v

        def string() -> str:
            nonlocal pos
            n = take("<Q")
            s = m[pos:pos + n].decode("utf-8", "surrogateescape")
            pos += n
            return s

        def value(t: int):
            if t == _STR:
                return string()
            if t == _ARR:
                et, n = take("<I"), take("<Q")
                return et, [value(et) for _ in range(n)]
            return take(_SCALAR[t])

        if m[:4] != b"GGUF":
            raise SystemExit(f"{path} is not a GGUF file")
        pos = 4
        _version, _n_tensors, n_kv = take("<I"), take("<Q"), take("<Q")
        out = {}
        for _ in range(n_kv):
            key = string()
            t = take("<I")
            out[key] = (t, value(t))
        return out


def _pack_str(s: str) -> bytes:
    b = s.encode("utf-8", "surrogateescape")
    return struct.pack("<Q", len(b)) + b


def _pack_value(t: int, v) -> bytes:
    if t == _STR:
        return _pack_str(v)
    if t == _ARR:
        et, items = v
        head = struct.pack("<IQ", et, len(items))
        if et == _STR:
            return head + b"".join(_pack_str(s) for s in items)
        return head + np.asarray(items, dtype=np.dtype(_SCALAR[et])).tobytes()
    return struct.pack(_SCALAR[t], v)


def _padded(n: int) -> int:
    return n + (-n) % ALIGNMENT


def _tokenizer_meta(source: Path, n_vocab: int) -> dict[str, tuple[int, object]]:
    """The tokenizer.* metadata of `source`, its vocabulary padded with unused "[PADi]" entries to `n_vocab` rows
    (as convert_hf_to_gguf pads Qwen's). Timings depend on the vocabulary's size, not on its content."""
    meta = {k: v for k, v in _read_metadata(source).items() if k.startswith("tokenizer.")}
    tokens = list(meta["tokenizer.ggml.tokens"][1][1])
    types = list(meta["tokenizer.ggml.token_type"][1][1])
    if len(tokens) > n_vocab:
        raise SystemExit(f"{source.name} has {len(tokens)} tokens, more than the shape's {n_vocab}")
    taken = set(tokens)
    i = len(tokens)
    while len(tokens) < n_vocab:
        name = f"[PAD{i}]"
        i += 1
        if name not in taken:
            tokens.append(name)
            types.append(TOKEN_UNUSED)
    meta["tokenizer.ggml.tokens"] = (_ARR, (_STR, tokens))
    meta["tokenizer.ggml.token_type"] = (_ARR, (meta["tokenizer.ggml.token_type"][1][0], types))
    if "tokenizer.ggml.scores" in meta:
        et, scores = meta["tokenizer.ggml.scores"][1]
        meta["tokenizer.ggml.scores"] = (_ARR, (et, list(scores) + [0.0] * (n_vocab - len(scores))))
    return meta


def llama31_rope_factors(base: float, dim: int) -> np.ndarray:
    """Llama 3.1's rope_freqs (convert_hf_to_gguf, rope_scaling "llama3": factor 8, low 1, high 4, original 8192)."""
    factor, low, high, old_ctx = 8.0, 1.0, 4.0, 8192
    out = []
    for freq in 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)):
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype="<f4")


def _tensor_list(s: Shape) -> list[tuple[str, tuple[int, ...], int]]:
    """(name, numpy shape (rows, cols), ggml type) of every tensor of the shape, in llama.cpp's names."""
    kv = s.n_head_kv * s.head_dim
    out = [("token_embd.weight", (s.n_vocab, s.n_embd), _GGML_Q8_0), ("output_norm.weight", (s.n_embd,), _GGML_F32),
           ("output.weight", (s.n_vocab, s.n_embd), _GGML_Q8_0)]
    if s.llama31_rope_freqs:
        out.append(("rope_freqs.weight", (s.head_dim // 2,), _GGML_F32))
    for i in range(s.n_layer):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", (s.n_embd,), _GGML_F32),
                (p + "attn_q.weight", (s.n_head * s.head_dim, s.n_embd), _GGML_Q8_0),
                (p + "attn_k.weight", (kv, s.n_embd), _GGML_Q8_0),
                (p + "attn_v.weight", (kv, s.n_embd), _GGML_Q8_0),
                (p + "attn_output.weight", (s.n_embd, s.n_head * s.head_dim), _GGML_Q8_0),
                (p + "ffn_norm.weight", (s.n_embd,), _GGML_F32),
                (p + "ffn_gate.weight", (s.n_ff, s.n_embd), _GGML_Q8_0),
                (p + "ffn_up.weight", (s.n_ff, s.n_embd), _GGML_Q8_0),
                (p + "ffn_down.weight", (s.n_embd, s.n_ff), _GGML_Q8_0)]
        if s.qkv_bias:
            out += [(p + "attn_q.bias", (s.n_embd,), _GGML_F32), (p + "attn_k.bias", (kv,), _GGML_F32),
                    (p + "attn_v.bias", (kv,), _GGML_F32)]
    return out


def _nbytes(shape: tuple[int, ...], ggml_type: int) -> int:
    n = int(np.prod(shape))
    return n * 34 // 32 if ggml_type == _GGML_Q8_0 else 4 * n


def shape_params(s: Shape) -> int:
    return sum(int(np.prod(shp)) for _, shp, _ in _tensor_list(s))


def write_random_q8_0(s: Shape, tokenizer_source: Path, path: Path, seed: int = 0) -> None:
    """A random-weight GGUF of shape `s`: Q8_0 matrices (uniform int8 values, scale 2.73e-4: std ~0.02), F32 norms
    of ones, small F32 biases; written tensor by tensor in chunks (never a whole tensor in memory)."""
    rng = np.random.default_rng(seed)
    a = s.arch
    meta: dict[str, tuple[int, object]] = {
        "general.architecture": (_STR, a),
        "general.name": (_STR, f"epi bench random weights, {s.label}"),
        "general.file_type": (_U32, 7),  # LLAMA_FTYPE_MOSTLY_Q8_0
        "general.quantization_version": (_U32, 2),
        "general.alignment": (_U32, ALIGNMENT),
        f"{a}.block_count": (_U32, s.n_layer),
        f"{a}.context_length": (_U32, s.ctx_train),
        f"{a}.embedding_length": (_U32, s.n_embd),
        f"{a}.feed_forward_length": (_U32, s.n_ff),
        f"{a}.attention.head_count": (_U32, s.n_head),
        f"{a}.attention.head_count_kv": (_U32, s.n_head_kv),
        f"{a}.attention.layer_norm_rms_epsilon": (_F32, s.rms_eps),
        f"{a}.rope.freq_base": (_F32, s.rope_base),
        f"{a}.rope.dimension_count": (_U32, s.head_dim),
        f"{a}.vocab_size": (_U32, s.n_vocab),
    }
    meta.update(_tokenizer_meta(tokenizer_source, s.n_vocab))
    tensors = _tensor_list(s)
    head = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(meta))]
    head += [_pack_str(k) + struct.pack("<I", t) + _pack_value(t, v) for k, (t, v) in meta.items()]
    offset = 0
    for name, shp, gt in tensors:
        ne = shp[::-1]
        head.append(_pack_str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
                    + struct.pack("<IQ", gt, offset))
        offset += _padded(_nbytes(shp, gt))
    header = b"".join(head)
    scale = np.frombuffer(np.float16(0.02 / 73.9).tobytes(), dtype=np.uint8)
    chunk_blocks = 1 << 21  # 71 MB of Q8_0 at a time
    with open(path, "wb") as f:
        f.write(header + b"\0" * ((-len(header)) % ALIGNMENT))
        for name, shp, gt in tensors:
            nbytes = _nbytes(shp, gt)
            if gt == _GGML_Q8_0:
                left = int(np.prod(shp)) // 32
                while left:
                    nb = min(left, chunk_blocks)
                    blocks = np.empty((nb, 34), dtype=np.uint8)
                    blocks[:, :2] = scale
                    blocks[:, 2:] = np.frombuffer(rng.bytes(nb * 32), dtype=np.uint8).reshape(nb, 32)
                    f.write(blocks.tobytes())
                    left -= nb
            elif name == "rope_freqs.weight":
                f.write(llama31_rope_factors(s.rope_base, s.head_dim).tobytes())
            elif name.endswith(".bias"):
                f.write((rng.standard_normal(shp, dtype=np.float32) * 0.02).astype("<f4").tobytes())
            else:
                f.write(np.ones(shp, dtype="<f4").tobytes())
            f.write(b"\0" * ((-nbytes) % ALIGNMENT))


def quantize(src: Path, dst: Path, ftype_name: str = "LLAMA_FTYPE_MOSTLY_Q4_K_M") -> None:
    import llama_cpp as L

    from episodic_cli.engine.llama.backend import quiet_llama_logs

    quiet_llama_logs()
    params = L.llama_model_quantize_default_params()
    params.ftype = getattr(L, ftype_name)
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 2
    rc = L.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0 or not dst.is_file():
        raise SystemExit(f"llama.cpp could not quantize {src.name} (code {rc})")


def generated_path(s: Shape, root: Path) -> Path:
    return root / f"{s.name}-random-q4_k_m.gguf"


def _shape_record(s: Shape) -> dict:
    return {**asdict(s), "weights": "random Q8_0 (seed 0) -> llama.cpp Q4_K_M", "writer": 1}


# ---------------------------------------------------------------------------------------------------- workers
# Each runs in a process of its own under /usr/bin/time -v and writes its numbers as JSON to --result.


def _rss_now() -> int:
    return _rss_parts()["VmRSS"]


def _rss_parts() -> dict[str, int]:
    """The process's resident memory now (VmRSS) and its parts: anonymous (heap: the KV cache, buffers, weights
    llama.cpp copied out of the file to repack them) and file-backed (the model's mapped pages it has touched)."""
    out = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in out:
                out[key] = int(line.split()[1]) * 1024
    return out


def worker_generate(a) -> dict:
    s = SHAPES[a.shape]
    root = Path(a.dir)
    out = generated_path(s, root)
    from episodic_cli.engine.llama.models import bundled_model_path, prepare_model

    tok_src = prepare_model(s.tokenizer_from).source if s.tokenizer_from != "smollm2" else bundled_model_path()
    q8 = root / f".{s.name}-random-q8_0.gguf.tmp"
    tmp = root / f".{out.name}.tmp"
    t0 = time.perf_counter()
    write_random_q8_0(s, tok_src, q8)
    t1 = time.perf_counter()
    q8_bytes = q8.stat().st_size
    try:
        quantize(q8, tmp)
    finally:
        q8.unlink(missing_ok=True)
    t2 = time.perf_counter()
    os.replace(tmp, out)
    out.with_suffix(".json").write_text(json.dumps(_shape_record(s), indent=1))
    return {"path": str(out), "tokenizer_source": str(tok_src), "q8_0_bytes": q8_bytes, "write_q8_0_s": t1 - t0,
            "quantize_s": t2 - t1, "bytes": out.stat().st_size}


def _load(a):
    from episodic_cli.engine.llama.backend import LlamaModel

    rss0 = _rss_now()
    t0 = time.perf_counter()
    model = LlamaModel(Path(a.model_path))
    parts = _rss_parts()
    return model, {"load_s": time.perf_counter() - t0, "rss_after_imports": rss0, "rss_after_load": parts["VmRSS"],
                   "rss_anon_after_load": parts["RssAnon"], "rss_file_after_load": parts["RssFile"]}


def _prompt_parts(model, n_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """kv mode's prompt around its blocks (KVModeAnswerer._plan): the sink and the question part, in tokens."""
    from episodic_cli.engine.prompt import BLOCK_MARK, kv_messages

    texts = model.apply_chat_template(kv_messages(QUESTION, n_blocks)).split(BLOCK_MARK)
    return model.tokenize(texts[0], special=True), model.tokenize(texts[-1], special=True)


def worker_prep(a) -> dict:
    """(c) and (d): epi's ingest pass over the prose, blocks captured, encoded q8_0 and written as they are decoded."""
    from episodic_cli.engine.ingest.pipeline import ingest_context
    from episodic_cli.engine.ingest.segment import SegmentParams, clean_cut_mask
    from episodic_cli.engine.kv.blocks import capture_block, encode_block, parse_state_blob
    from episodic_cli.engine.llama.backend import LlamaSession, default_threads, generation_threads
    from episodic_cli.engine.prompt import sink_tokens

    model, out = _load(a)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("block-*.ekvp"):
        old.unlink()
    tokens = model.tokenize(haystack(a.tokens * 8))
    if len(tokens) < a.tokens:
        raise SystemExit(f"the prose gave only {len(tokens)} tokens")
    tokens = tokens[: a.tokens].astype(np.int32)
    sink = sink_tokens(model)
    n_blocks = max(1, round(a.tokens / a.block_tokens))
    bounds = np.linspace(0, a.tokens, n_blocks + 1).round().astype(int)
    params = SegmentParams()
    clean = clean_cut_mask([model.pieces()[t] for t in tokens])[: len(tokens)]
    session = LlamaSession(model, n_ctx=ingest_context(params, len(sink)), n_threads=a.threads, n_seq_max=2)
    session.warm_up()
    session.surprise_pass(tokens[:1], sink, params.local)  # the sink, decoded once per session as ingest does
    out["rss_after_warm_up"] = _rss_now()
    payload_bytes = {"q8_0": 0}
    parsed = []
    captured = [0]
    spent = {"capture_s": 0.0, "encode_s": 0.0, "write_s": 0.0}

    def on_decoded(_surprise, known: int) -> int:
        decoded = known - 1 if known < len(tokens) else len(tokens)
        while captured[0] < n_blocks and bounds[captured[0] + 1] <= decoded:
            j = captured[0]
            t0 = time.perf_counter()
            block = parse_state_blob(capture_block(session, 0, session.cache_pos(int(bounds[j])),
                                                   session.cache_pos(int(bounds[j + 1]))))
            t1 = time.perf_counter()
            payload = encode_block(block, "q8_0")
            t2 = time.perf_counter()
            with open(work / f"block-{j:03d}.ekvp", "wb") as f:
                f.write(payload)
            t3 = time.perf_counter()
            spent["capture_s"] += t1 - t0
            spent["encode_s"] += t2 - t1
            spent["write_s"] += t3 - t2
            payload_bytes["q8_0"] += len(payload)
            parsed.append(block)
            captured[0] += 1
        return int(bounds[captured[0]]) if captured[0] < n_blocks else len(tokens)

    t0 = time.perf_counter()
    session.surprise_pass(tokens, sink, params.local, on_decoded=on_decoded, measure_at=clean)
    seconds = time.perf_counter() - t0
    out["rss_after_pass"] = _rss_now()
    if captured[0] != n_blocks:
        raise SystemExit(f"captured {captured[0]} of {n_blocks} blocks")
    sink_block = parse_state_blob(capture_block(session, 0, 0, len(sink)))
    (work / "sink.ekvp").write_bytes(encode_block(sink_block, "f16"))
    f16_bytes = sum(len(encode_block(b, "f16")) for b in parsed)
    os.sync()
    info = model.info
    _sink, tail = _prompt_parts(model, n_blocks)
    manifest = {"tokens": tokens.tolist(), "sink": sink.tolist(), "tail": tail.tolist(), "bounds": bounds.tolist(),
                "captured_positions": [[int(b.positions.min()), int(b.positions.max()) + 1] for b in parsed]}
    (work / "manifest.json").write_text(json.dumps(manifest))
    out.update({
        "architecture": info.architecture, "n_params": info.n_params, "n_layer": info.n_layer, "n_embd": info.n_embd,
        "n_head_kv": info.n_head_kv, "n_vocab": info.n_vocab, "n_ctx_train": info.n_ctx_train,
        "file_type": model.meta("general.file_type"), "threads_batch": a.threads or default_threads(),
        "threads_decode": a.threads or generation_threads(), "ingest_n_ctx": session.n_ctx, "sink_tokens": len(sink),
        "tail_tokens": len(tail), "tokens": len(tokens), "blocks": n_blocks, "prep_s": seconds,
        "prep_tok_s": len(tokens) / seconds, **spent, "clean_share": float(clean.mean()),
        "kv_bytes_per_token_q8_0": payload_bytes["q8_0"] / len(tokens), "kv_bytes_per_token_f16": f16_bytes / len(tokens),
        "kv_cache_bytes_per_token": 2 * info.n_layer * 2 * int(sink_block.k.shape[2]),
        "block_bytes_q8_0": payload_bytes["q8_0"], "moved_blocks": sum(
            1 for j, b in enumerate(parsed) if int(b.positions.min()) != len(sink) + int(bounds[j])),
    })
    session.close()
    return out


def _answer_session(model, a):
    from episodic_cli.engine.answer.short_answer import SPAN_SEQUENCES
    from episodic_cli.engine.budgets import ANSWER_CONTEXT
    from episodic_cli.engine.llama.backend import LlamaSession

    n_ctx = min(ANSWER_CONTEXT, model.info.n_ctx_train)  # Workspace.answer_context
    session = LlamaSession(model, n_ctx=n_ctx, n_threads=a.threads, n_seq_max=SPAN_SEQUENCES)
    t0 = time.perf_counter()
    session.warm_up()
    return session, {"n_ctx": n_ctx, "warm_up_s": time.perf_counter() - t0}


def _first_token_then_one(session, pos: int, t0: float, out: dict) -> None:
    token = int(np.argmax(session.last_logits()))
    out["first_token_s"] = time.perf_counter() - t0
    out["first_token"] = token
    t1 = time.perf_counter()
    session.decode(np.array([token], dtype=np.int32), pos)
    out["one_decode_s"] = time.perf_counter() - t1
    parts = _rss_parts()
    out["rss_after_first_token"] = parts["VmRSS"]
    out["rss_anon_after_first_token"], out["rss_file_after_first_token"] = parts["RssAnon"], parts["RssFile"]


def worker_text(a) -> dict:
    """(a): the sink, the prose and the question prefilled into an empty answer context, then the first token."""
    model, out = _load(a)
    m = json.loads((Path(a.work) / "manifest.json").read_text())
    prompt = np.array(m["sink"] + m["tokens"] + m["tail"], dtype=np.int32)
    session, extra = _answer_session(model, a)
    out.update(extra, prompt_tokens=len(prompt), rss_after_warm_up=_rss_now())
    t0 = time.perf_counter()
    pos = session.prefill(prompt, 0)
    _first_token_then_one(session, pos, t0, out)
    out["prefill_tok_s"] = len(prompt) / out["first_token_s"]
    session.close()
    return out


def worker_blocks(a) -> dict:
    """(b): the sink's f16 block and the q8_0 blocks read from disk and loaded, the question decoded, first token."""
    from episodic_cli.engine.kv.blocks import decode_block, load_block, session_v_trans, state_blob_from_payload
    from episodic_cli.engine.kv.keys import k_shift, k_shift_left_to_llama_cpp, rope_params

    model, out = _load(a)
    work = Path(a.work)
    m = json.loads((work / "manifest.json").read_text())
    files = [work / "sink.ekvp", *sorted(work.glob("block-*.ekvp"))]
    tail = np.array(m["tail"], dtype=np.int32)
    session, extra = _answer_session(model, a)
    rope = rope_params(model)
    shift = k_shift(rope, model)
    out.update(extra, k_rotated_by=("epi (native, as the block is assembled)" if shift is not None else
                                    "llama.cpp's K-shift at the next decode: " + str(k_shift_left_to_llama_cpp(rope, model))))
    for path in files:  # read from the disk, not from the page cache the preparing process left them in
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    out["rss_after_warm_up"] = _rss_now()
    v_trans = session_v_trans(session)
    read_s = assemble_s = load_s = 0.0
    t0 = time.perf_counter()
    sink = decode_block(files[0].read_bytes(), "f16")  # KVModeAnswerer._load_sink
    pos = load_block(session, sink, 0, 0)
    sink_s = time.perf_counter() - t0
    for path in files[1:]:  # KVModeAnswerer._load
        t1 = time.perf_counter()
        payload = path.read_bytes()
        t2 = time.perf_counter()
        blob = state_blob_from_payload(payload, 1.0, v_trans=v_trans, move_to=pos, rope=shift)
        t3 = time.perf_counter()
        pos = load_block(session, blob, 0, pos)
        t4 = time.perf_counter()
        read_s, assemble_s, load_s = read_s + t2 - t1, assemble_s + t3 - t2, load_s + t4 - t3
    t5 = time.perf_counter()
    pos = session.prefill(tail, pos)
    question_s = time.perf_counter() - t5
    _first_token_then_one(session, pos, t0, out)
    out.update(sink_s=sink_s, read_s=read_s, assemble_s=assemble_s, load_block_s=load_s, question_s=question_s,
               loaded_tokens=pos - len(tail), blocks=len(files) - 1)
    session.close()
    return out


WORKERS = {"generate": worker_generate, "prep": worker_prep, "text": worker_text, "blocks": worker_blocks}


# ---------------------------------------------------------------------------------------------------- the run


def log(msg: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {msg}", flush=True)


def run_worker(step: str, args: list[str], tag: str) -> dict:
    """One measurement in a fresh process under /usr/bin/time -v; its JSON plus the OS's peak RSS and wall time."""
    SCRATCH.mkdir(parents=True, exist_ok=True)
    result = SCRATCH / f"{tag}.{os.getpid()}.json"
    cmd = ["/usr/bin/time", "-v", sys.executable, str(Path(__file__).resolve()), "--worker", step,
           "--result", str(result), *args]
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not result.is_file():
        sys.stdout.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise RuntimeError(f"{step} failed (exit {proc.returncode})")
    out = json.loads(result.read_text())
    result.unlink()
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    out["peak_rss"] = int(rss.group(1)) * 1024 if rss else None
    out["process_wall_s"] = wall
    out["load_avg_1m"] = [load0, os.getloadavg()[0]]
    return out


def model_facts_prediction(path: Path, n_ctx: int | None) -> dict | None:
    """epi's own prediction, where engine/llama/model_facts.py is importable (None otherwise)."""
    try:
        from episodic_cli.engine.llama.model_facts import read_model_facts
    except ImportError:
        return None
    facts = read_model_facts(path)
    return {"memory_needed": int(facts.memory_needed(n_ctx)), "kv_bytes_per_token_q8_0": int(facts.kv_bytes_per_token("q8_0")),
            "kv_bytes_per_token_f16": int(facts.kv_bytes_per_token("f16")), "n_ctx": n_ctx}


def add_ratios(row: dict) -> None:
    p = row.get("predicted")
    if not p:
        return
    for which in ("text", "blocks"):
        rss = row.get(f"peak_rss_{which}")
        if rss:
            p[f"measured_over_predicted_{which}"] = rss / p["memory_needed"]


def machine() -> dict:
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        import llama_cpp as L

        llama = {"llama_cpp_python": L.__version__, "system_info": L.llama_print_system_info().decode().strip()}
    except Exception:  # noqa: BLE001
        llama = {}
    return {"cores": os.cpu_count(), "cpu": cpu, "memory_bytes": mem, "python": platform.python_version(),
            "platform": platform.platform(), **llama}


def fmt_gb(n: float | None) -> str:
    return "-" if not n else f"{n / 1e9:.2f} GB"


def table(rows: list[dict]) -> str:
    lines = ["| model | params | file | KV bytes/token q8_0 (f16) | block prep tok/s | first token, text (s) "
             "| first token, blocks (s) | text / blocks | peak RSS text / blocks | epi predicts |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "first_token_blocks_s" not in r or "first_token_text_s" not in r:
            continue
        p = r.get("predicted")
        pred = "-" if not p else (f"{fmt_gb(p['memory_needed'])} ({p.get('measured_over_predicted_text', 0):.2f}x / "
                                  f"{p.get('measured_over_predicted_blocks', 0):.2f}x)")
        lines.append(
            f"| {r['label']} | {r['n_params'] / 1e9:.2f}B | {r['form']}, {fmt_gb(r['file_bytes'])} "
            f"| {r['kv_bytes_per_token_q8_0']:,.0f} ({r['kv_bytes_per_token_f16']:,.0f}) | {r['prep_tok_s']:.1f} "
            f"| {r['first_token_text_s']:.2f} | {r['first_token_blocks_s']:.2f} | **{r['ratio']:.0f}x** "
            f"| {fmt_gb(r['peak_rss_text'])} / {fmt_gb(r['peak_rss_blocks'])} | {pred} |")
    return "\n".join(lines)


NOTE = ("Random weights give true timings, not answers: the 7B and 8B shapes are random-weight GGUFs with those "
        "models' exact tensors, quantized Q4_K_M by llama.cpp; the 0.5B and 1.5B are the real files epi installs.")


def ensure_model(s: Shape, a, record: dict) -> Path:
    if s.real:
        from episodic_cli.engine.llama.models import prepare_model

        prepared = prepare_model(s.real)
        record.update(form="F16" if prepared.form.startswith("f16") else "Q4_K_M", form_note=prepared.form, source=str(prepared.source), source_bytes=prepared.source.stat().st_size)
        return prepared.path
    root = Path(a.dir)
    root.mkdir(parents=True, exist_ok=True)
    path = generated_path(s, root)
    meta = path.with_suffix(".json")
    if path.is_file() and meta.is_file() and json.loads(meta.read_text()) == _shape_record(s):
        log(f"{s.name}: reusing {path}")
        record.update(form="Q4_K_M (random)", generated="cached")
        return path
    need = shape_params(s) * 34 / 32 * 1.7 + 2e9  # the Q8_0 intermediate, the Q4_K_M result and a margin
    free = shutil.disk_usage(root).free
    if free < need:
        raise RuntimeError(f"{s.name}: {need / 1e9:.1f} GB of disk needed at {root}, {free / 1e9:.1f} GB free")
    log(f"{s.name}: writing random Q8_0 weights ({shape_params(s) / 1e9:.2f}B params) and quantizing to Q4_K_M "
        f"({free / 1e9:.0f} GB free)")
    gen = run_worker("generate", ["--shape", s.name, "--dir", str(root)], f"{s.name}-generate")
    log(f"{s.name}: Q8_0 {gen['q8_0_bytes'] / 1e9:.2f} GB written in {gen['write_q8_0_s']:.0f} s, Q4_K_M "
        f"{gen['bytes'] / 1e9:.2f} GB in {gen['quantize_s']:.0f} s (peak RSS {fmt_gb(gen['peak_rss'])})")
    record.update(form="Q4_K_M (random)", generated=gen)
    return path


def measure(s: Shape, a) -> dict:
    row: dict = {"shape": s.name, "label": s.label, "random_weights": s.real is None}
    if s.real is None:
        row["shape_params"] = asdict(s)
    path = ensure_model(s, a, row)
    row["path"] = str(path)
    row["file_bytes"] = path.stat().st_size
    work = Path(a.dir) / "work" / s.name
    common = ["--model-path", str(path), "--work", str(work), "--tokens", str(a.tokens),
              "--block-tokens", str(a.block_tokens)] + (["--threads", str(a.threads)] if a.threads else [])
    big = shape_params(s) >= BIG_PARAMS if s.real is None else False
    n_text = a.big_repeat if big else a.repeat
    n_prep = 1 if big else a.repeat
    preps, texts, blocks = [], [], []
    for i in range(n_prep):
        log(f"{s.name}: preparing blocks ({i + 1}/{n_prep})")
        preps.append(run_worker("prep", common, f"{s.name}-prep"))
        p = preps[-1]
        log(f"  {p['prep_tok_s']:.1f} tok/s over {p['tokens']} tokens ({p['blocks']} blocks, {p['moved_blocks']} "
            f"moved by the window), q8_0 {p['kv_bytes_per_token_q8_0']:,.0f} B/token, peak RSS {fmt_gb(p['peak_rss'])}, "
            f"load {p['load_avg_1m'][1]:.1f}")
    for i in range(max(n_text, a.repeat)):
        log(f"{s.name}: first token from blocks ({i + 1}/{max(n_text, a.repeat)})")
        blocks.append(run_worker("blocks", common, f"{s.name}-blocks"))
        b = blocks[-1]
        log(f"  {b['first_token_s']:.3f} s (read {b['read_s']:.3f}, assemble {b['assemble_s']:.3f}, load "
            f"{b['load_block_s']:.3f}, question {b['question_s']:.3f}), peak RSS {fmt_gb(b['peak_rss'])}, "
            f"load {b['load_avg_1m'][1]:.1f}")
        if i < n_text:
            log(f"{s.name}: first token re-reading {a.tokens} tokens as text ({i + 1}/{n_text})")
            texts.append(run_worker("text", common, f"{s.name}-text"))
            t = texts[-1]
            log(f"  {t['first_token_s']:.2f} s ({t['prefill_tok_s']:.1f} tok/s prefill), peak RSS "
                f"{fmt_gb(t['peak_rss'])}, load {t['load_avg_1m'][1]:.1f}")
    p = max(preps, key=lambda r: r["prep_tok_s"])
    row.update({k: p[k] for k in ("architecture", "n_params", "n_layer", "n_embd", "n_head_kv", "n_vocab",
                                  "n_ctx_train", "threads_batch", "threads_decode", "sink_tokens", "tail_tokens",
                                  "tokens", "blocks", "kv_bytes_per_token_q8_0", "kv_bytes_per_token_f16",
                                  "kv_cache_bytes_per_token")})
    row["prep_tok_s"] = p["prep_tok_s"]
    row["first_token_text_s"] = min(t["first_token_s"] for t in texts)
    row["first_token_blocks_s"] = min(b["first_token_s"] for b in blocks)
    row["ratio"] = row["first_token_text_s"] / row["first_token_blocks_s"]
    row["peak_rss_text"] = max(t["peak_rss"] or 0 for t in texts)
    row["peak_rss_blocks"] = max(b["peak_rss"] or 0 for b in blocks)
    row["decode_tok_s"] = 1 / min(r["one_decode_s"] for r in texts + blocks)
    # VmRSS = anonymous (KV cache, buffers, the weights llama.cpp copied out of the file to repack them for its CPU
    # kernels) + file-backed (the mapped model pages touched, including those of repacked tensors it read once)
    for which, runs in (("text", texts), ("blocks", blocks)):
        last = max(runs, key=lambda r: r["peak_rss"] or 0)
        row[f"rss_anon_{which}"] = last.get("rss_anon_after_first_token")
        row[f"rss_file_{which}"] = last.get("rss_file_after_first_token")
    row["load_avg_1m"] = [min(r["load_avg_1m"][0] for r in preps + texts + blocks),
                          max(r["load_avg_1m"][1] for r in preps + texts + blocks)]
    row["n_ctx"] = blocks[0]["n_ctx"]
    # a check that the blocks were loaded where they belong: with real weights the greedy first token is mostly
    # the same both ways (the blocks were computed in the ingest's window, and stored at q8_0)
    row["same_first_token"] = texts[0]["first_token"] == blocks[0]["first_token"]
    row["k_rotated_by"] = blocks[0]["k_rotated_by"]
    row["runs"] = {"prep": preps, "text": texts, "blocks": blocks}
    row["predicted"] = model_facts_prediction(path, row["n_ctx"])
    add_ratios(row)
    return row


def write(out: Path, doc: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, out)


def add_predictions(path: Path) -> None:
    doc = json.loads(path.read_text())
    for row in doc["models"]:
        row["predicted"] = model_facts_prediction(Path(row["path"]), row.get("n_ctx"))
        add_ratios(row)
    write(path, doc)
    print(table(doc["models"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--tokens", type=int, default=3000, help="prose tokens read as text or held as blocks")
    ap.add_argument("--block-tokens", type=int, default=250, help="tokens per block (~epi's events)")
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: epi's)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per measurement, best taken (blocks: every model)")
    ap.add_argument("--big-repeat", type=int, default=1, help="text runs (and preparations) for 3B+ random shapes")
    ap.add_argument("--dir", default="/work/bigmodels", help="generated models and the blocks' files")
    ap.add_argument("--out", type=Path, default=None, help="default bench/results/model-sizes/<date>.json")
    ap.add_argument("--add-predictions", type=Path, default=None, help="fill in epi's predictions in a result file")
    ap.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--shape", help=argparse.SUPPRESS)
    ap.add_argument("--model-path", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        Path(a.result).write_text(json.dumps(WORKERS[a.worker](a)))
        return
    if a.add_predictions:
        add_predictions(a.add_predictions)
        return
    global SCRATCH
    SCRATCH = Path(a.dir) / "work"
    started = time.perf_counter()
    out = a.out or RESULTS / f"{dt.date.today():%Y-%m-%d}.json"
    doc = {"date": dt.datetime.now().isoformat(timespec="seconds"), "command": " ".join(["python", "bench/models/model_sizes.py", *sys.argv[1:]]), "machine": machine(), "question": QUESTION, "tokens": a.tokens,
           "block_tokens": a.block_tokens, "threads": a.threads, "repeat": a.repeat, "big_repeat": a.big_repeat,
           "note": NOTE, "models": [], "failed": {}}
    log(f"machine: {doc['machine']['cores']} cores, {doc['machine']['cpu']}, load {os.getloadavg()[0]:.2f}")
    for name in a.models:
        s = SHAPES[name]
        try:
            doc["models"].append(measure(s, a))
        except (RuntimeError, SystemExit, OSError) as exc:
            log(f"{name}: FAILED: {exc}")
            doc["failed"][name] = str(exc)
        doc["total_s"] = time.perf_counter() - started
        write(out, doc)
    print()
    print(table(doc["models"]))
    print()
    print(NOTE)
    for r in doc["models"]:
        print(f"- {r['label']}: text / blocks = {r['ratio']:.0f}x; K moved by {r['k_rotated_by']}; decode "
              f"{r['decode_tok_s']:.1f} tok/s; n_ctx {r['n_ctx']}; blocks' peak RSS: {fmt_gb(r['rss_anon_blocks'])} "
              f"anonymous + {fmt_gb(r['rss_file_blocks'])} mapped file; load average {r['load_avg_1m'][0]:.1f}-"
              f"{r['load_avg_1m'][1]:.1f}")
    log(f"total {doc['total_s'] / 60:.1f} min; {out}")


if __name__ == "__main__":
    main()
