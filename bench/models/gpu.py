"""GPU offload: ingest tokens/s and first-token latency per model, every layer on the GPU (n_gpu_layers=-1).

Needs a CUDA (or Metal) build of epi's llama-cpp-python: native/build_cuda.sh. Each model runs in a process of its
own, one after the other, on the same text (CPython's pydoc topics), with the context epi uses (unified KV, F16
K/V, 512-token batches, flash attention off; engine/llama/backend.py, LlamaSession):

- ingest: the text in 2,048-token windows, each decoded from empty in 512-token batches with every token's logits
  (what the ingest's surprise pass asks of llama.cpp, logits copied back to the host batch by batch), and with the
  last token's logits only (plain prompt processing). Tokens/s, best of --rounds. This is llama.cpp's share of an
  ingest, not the whole pipeline (surprise kernel, segmentation, embedding and the store stay on the CPU; with
  --full, epi's whole ingest is timed too, where epi is installed).
- first token: a --prompt-tokens prompt decoded into an empty context, then the greedy first token: cold (the first
  ask after the model is loaded, what a fresh `epi ask` process pays after loading) and warm (median of --asks).
- decode: --gen greedy tokens after that prompt, tokens/s (an answer's speed).

The models: by default the installed ones, as epi prepares them (models.prepare_model: the bundled SmolLM2-135M
reading model expanded to F16, the Qwen answer models as shipped), found through epi when it is installed; or
--model NAME|FILE.gguf, repeated. Without epi installed (a bare GPU machine with only the CUDA llama-cpp-python),
give files: a small quantized one is expanded to F16 first as epi would (--as-shipped keeps it as it is).

    python bench/models/gpu.py [--model smollm2 --model qwen-1.5b | --model FILE.gguf ...] [--rounds 3] [--out FILE]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WINDOW = 2048
BATCH = 512  # backend.INGEST_BATCH
EXPAND_TO_F16_MAX_BYTES = 700_000_000  # model_facts.EXPAND_TO_F16_MAX_BYTES: the rule prepare_model applies
_keep_log = None


def haystack(n_chars: int) -> str:
    """Real prose: CPython's pydoc_data topics (PSF License), as bench/ingest/ingest_throughput.py reads."""
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[k] for k in sorted(topics))
    while len(text) < n_chars:
        text += "\n\n" + text
    return text[:n_chars]


def installed_models() -> list[str]:
    """The reading model and each installed answer model, by the names --model takes."""
    from episodic_cli.engine.llama.bundled import BUNDLED, is_installed
    from episodic_cli.engine.llama.models import READER_MODEL

    return [READER_MODEL, *(name for name, m in BUNDLED.items() if is_installed(m))]


def prepare(spec: str, as_shipped: bool, tmp: Path) -> tuple[Path, str]:
    """The file llama.cpp loads for `spec` and its form. Through epi's prepare_model where epi is installed (the same
    cached F16 file `epi` runs); otherwise the same rule by hand: a quantized file under 0.7 GB becomes F16."""
    path = Path(spec).expanduser()
    if as_shipped and path.is_file():
        return path.resolve(), "as provided (--as-shipped)"
    try:
        from episodic_cli.engine.llama.models import prepare_model
    except ImportError:
        prepare_model = None
    if prepare_model is not None:
        prepared = prepare_model(spec)
        return prepared.path, prepared.form
    if not path.is_file():
        raise SystemExit(f"{spec}: no such file, and epi is not installed here to find models by name; "
                         "pass --model FILE.gguf")
    sys.path.insert(0, str(REPO))  # the header reader needs nothing but the standard library
    from episodic_cli.engine.llama.gguf import peek_file_type

    if path.stat().st_size >= EXPAND_TO_F16_MAX_BYTES or peek_file_type(path) in (0, 1, 32):
        return path.resolve(), "as provided"
    import llama_cpp as L

    target = tmp / f"{path.stem}.f16.gguf"
    params = L.llama_model_quantize_default_params()
    params.ftype = L.LLAMA_FTYPE_MOSTLY_F16
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 2
    rc = L.llama_model_quantize(str(path).encode(), str(target).encode(), ctypes.byref(params))
    if rc != 0:
        raise SystemExit(f"llama.cpp could not expand {path} to F16 (code {rc})")
    return target, f"f16 (expanded from {path.name})"


class Context:
    """One llama.cpp context with epi's parameters (LlamaSession's), and a reusable batch."""

    def __init__(self, L, model, n_ctx: int, threads: int):
        self.L = L
        params = L.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = BATCH
        params.n_ubatch = BATCH
        params.n_seq_max = 1
        params.n_threads = threads
        params.n_threads_batch = threads
        params.kv_unified = True
        params.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.type_k = L.GGML_TYPE_F16
        params.type_v = L.GGML_TYPE_F16
        self.ctx = L.llama_init_from_model(model, params)
        if not self.ctx:
            raise SystemExit(f"llama.cpp could not create a {n_ctx}-token context")
        self.memory = L.llama_get_memory(self.ctx)
        self.batch = L.llama_batch_init(BATCH, 0, 1)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))

    def clear(self) -> None:
        self.L.llama_memory_clear(self.memory, True)

    def decode(self, tokens, pos0: int, all_logits: bool) -> None:
        b, n = self.batch, len(tokens)
        b.n_tokens = n
        for i, t in enumerate(tokens):
            b.token[i] = int(t)
            b.pos[i] = pos0 + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 1 if all_logits or i == n - 1 else 0
        rc = self.L.llama_decode(self.ctx, b)
        if rc != 0:
            raise SystemExit(f"llama_decode failed (code {rc})")

    def prefill(self, tokens, all_logits: bool = False) -> None:
        for a in range(0, len(tokens), BATCH):
            self.decode(tokens[a : a + BATCH], a, all_logits)
            if all_logits:
                self.L.llama_synchronize(self.ctx)  # the surprise pass reads every batch's logits before the next
        self.L.llama_synchronize(self.ctx)

    def greedy(self) -> int:
        import numpy as np

        row = np.ctypeslib.as_array(self.L.llama_get_logits_ith(self.ctx, -1), shape=(self.n_vocab,))
        return int(row.argmax())

    def close(self) -> None:
        self.L.llama_batch_free(self.batch)
        self.L.llama_free(self.ctx)


def run_model(spec: str, args) -> dict:
    """One model's figures, measured in this process (the driver starts one process per model)."""
    import llama_cpp as L
    import numpy as np

    global _keep_log
    chunks: list[str] = []  # llama.cpp logs in pieces; lines are cut afterwards

    @L.llama_log_callback
    def keep(level, text, user_data):  # pragma: no cover - called from C
        chunks.append(text.decode("utf-8", "replace"))

    _keep_log = keep  # alive as long as llama.cpp may call it
    L.llama_backend_init()
    tmp = Path(tempfile.mkdtemp(prefix="epi-gpu-bench-"))
    path, form = prepare(spec, args.as_shipped, tmp)
    L.llama_log_set(keep, None)  # after prepare: epi's model preparation silences llama.cpp's log
    offload = bool(L.llama_supports_gpu_offload())
    mparams = L.llama_model_default_params()
    mparams.n_gpu_layers = args.n_gpu_layers
    t0 = time.perf_counter()
    model = L.llama_model_load_from_file(str(path).encode(), mparams)
    if not model:
        raise SystemExit(f"could not load {path}")
    load_s = time.perf_counter() - t0
    vocab = L.llama_model_get_vocab(model)
    text = haystack(args.chars).encode("utf-8")
    buf = (L.llama_token * (len(text) + 16))()
    n = L.llama_tokenize(vocab, text, len(text), buf, len(buf), False, False)
    tokens = np.ctypeslib.as_array(buf)[:n].astype(np.int32)
    n_windows = len(tokens) // WINDOW
    if n_windows == 0 or len(tokens) < args.prompt_tokens:
        raise SystemExit(f"{n} tokens of text: raise --chars")
    threads = args.threads or max(1, (os.cpu_count() or 2) // 2)
    n_ctx = max(WINDOW, args.prompt_tokens + args.gen + 16)
    ctx = Context(L, model, n_ctx, threads)
    prompt = tokens[: args.prompt_tokens]

    def ask() -> tuple[float, int]:
        ctx.clear()
        t = time.perf_counter()
        ctx.prefill(prompt)
        first = ctx.greedy()
        return time.perf_counter() - t, first

    cold_s, first = ask()  # nothing has run on this context yet: kernels load, cuBLAS starts, graphs are built
    warm = [ask()[0] for _ in range(args.asks)]

    def ingest_rate(all_logits: bool) -> float:
        done, t = 0, time.perf_counter()
        for w in range(n_windows):
            ctx.clear()
            ctx.prefill(tokens[w * WINDOW : (w + 1) * WINDOW], all_logits)
            done += WINDOW
        return done / (time.perf_counter() - t)

    every = [ingest_rate(True) for _ in range(args.rounds)]
    last = [ingest_rate(False) for _ in range(args.rounds)]

    ctx.clear()
    ctx.prefill(prompt)
    tok, pos, t = first, len(prompt), time.perf_counter()
    for _ in range(args.gen):
        ctx.decode([tok], pos, False)
        tok = ctx.greedy()
        pos += 1
    decode_tps = args.gen / (time.perf_counter() - t)
    ctx.close()

    desc = ctypes.create_string_buffer(256)
    L.llama_model_desc(model, desc, len(desc))
    row = {"model": spec, "file": path.name, "form": form, "desc": desc.value.decode(),
           "n_params": L.llama_model_n_params(model), "n_layer": L.llama_model_n_layer(model),
           "file_mb": round(path.stat().st_size / 1e6, 1), "gpu_offload": offload,
           "n_gpu_layers": args.n_gpu_layers, "threads": threads, "load_s": round(load_s, 2),
           "tokens": n_windows * WINDOW, "ingest_every_logits_tok_s": round(max(every), 1),
           "ingest_last_logits_tok_s": round(max(last), 1),
           "ingest_rounds": {"every_logits": [round(x, 1) for x in every], "last_logits": [round(x, 1) for x in last]},
           "prompt_tokens": len(prompt), "first_token_cold_s": round(cold_s, 4),
           "first_token_warm_s": round(statistics.median(warm), 4),
           "first_token_warm_all_s": [round(x, 4) for x in warm],
           "decode_tok_s": round(decode_tps, 1), "gen_tokens": args.gen,
           "llama_log": [line.strip() for line in "".join(chunks).splitlines() if any(
               k in line for k in ("offload", "CUDA", "buffer size", "Metal", "VRAM", "compute capability"))
               and not any(k in line for k in ("assigned to device", ": dev = "))][:40]}
    L.llama_model_free(model)
    if args.full:
        row["full_ingest"] = full_ingest(spec, args)
    return row


def full_ingest(spec: str, args) -> dict:
    """epi's whole ingest of the same text (surprise, segmentation, KV capture, embedding, commit) into a fresh store:
    the model is offloaded whole on a GPU build (LlamaModel's n_gpu_layers=999)."""
    from episodic_cli.engine.documents.sources import discover
    from episodic_cli.engine.ingest.segment import SegmentParams
    from episodic_cli.engine.workspace import Workspace

    root = Path(tempfile.mkdtemp(prefix="epi-gpu-full-"))
    doc = root / "topics.txt"
    doc.write_text(haystack(args.chars), encoding="utf-8")
    ws = Workspace(spec, str(root / "store"), args.threads)
    ws.model  # noqa: B018 - loaded before the clock
    ws.embedder.load(batches=True)
    params = SegmentParams()
    store = ws.store_for_writing(params)
    t0 = time.perf_counter()
    with ws.ingest_run(store, params, "q8_0", None) as ingestor:
        results = list(ingestor.ingest(discover([doc])))
    seconds = time.perf_counter() - t0
    tokens = sum(r.tokens for r in results)
    ws.close()
    return {"tokens": tokens, "events": sum(r.events for r in results), "seconds": round(seconds, 2),
            "tok_s": round(tokens / seconds, 1)}


def device_name() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", help="a model name (smollm2, qwen-1.5b, qwen-0.5b) or a .gguf "
                    "file; repeat for several (default: every installed model)")
    ap.add_argument("--as-shipped", action="store_true", help="load .gguf files as given, without the F16 expansion")
    ap.add_argument("--chars", type=int, default=40_000, help="prose to read (40,000 chars ~ 9-10k tokens)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=2000, help="first-token prompt (a question over retrieved "
                    "events is 1-3k tokens)")
    ap.add_argument("--asks", type=int, default=5, help="warm first-token asks (the median is reported)")
    ap.add_argument("--gen", type=int, default=128, help="greedy tokens for the decode rate")
    ap.add_argument("--n-gpu-layers", type=int, default=-1, help="-1: every layer on the GPU")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--full", action="store_true", help="also time epi's whole ingest (needs epi installed)")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/gpu.json")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure this model and print its JSON
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_model(args.one, args)))
        return 0
    import llama_cpp as L

    offload = bool(L.llama_supports_gpu_offload())
    if not offload:
        print("warning: this llama-cpp-python has no GPU offload (a CPU build): the figures below are CPU figures; "
              "build one with native/build_cuda.sh", file=sys.stderr)
    models = args.model
    if not models:
        try:
            models = installed_models()
        except ImportError as exc:
            raise SystemExit(f"epi is not installed here ({exc}); name model files with --model FILE.gguf") from None
    passed = list(argv if argv is not None else sys.argv[1:])
    rest = ["--chars", str(args.chars), "--rounds", str(args.rounds), "--prompt-tokens", str(args.prompt_tokens),
            "--asks", str(args.asks), "--gen", str(args.gen), "--n-gpu-layers", str(args.n_gpu_layers)]
    rest += ["--threads", str(args.threads)] if args.threads else []
    rest += ["--as-shipped"] if args.as_shipped else []
    rest += ["--full"] if args.full else []
    rows, failed = [], {}
    for spec in models:
        print(f"{spec}: measuring", flush=True)
        done = subprocess.run([sys.executable, __file__, "--one", spec, *rest], capture_output=True, text=True)
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            failed[spec] = lines[-1] if lines else f"exit code {done.returncode}"
            print(f"{spec}: failed: {failed[spec]}", flush=True)
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    if rows:
        print("\n| model (form) | offload | load (s) | ingest tok/s, every / last logits | "
              "first token cold / warm (s) | decode tok/s |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['model']} ({r['form']}) | {'GPU' if r['gpu_offload'] else 'CPU'} | {r['load_s']} | "
                  f"{r['ingest_every_logits_tok_s']:,.0f} / {r['ingest_last_logits_tok_s']:,.0f} | "
                  f"{r['first_token_cold_s']:.3f} / {r['first_token_warm_s']:.4f} | {r['decode_tok_s']:,.0f} |")
            for line in r["llama_log"]:
                if "offloaded" in line:
                    print(f"  {r['model']}: {line}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": "python bench/models/gpu.py " + " ".join(passed), "date": time.strftime("%Y-%m-%d %H:%M"),
        "device": device_name(), "gpu_offload": offload, "llama_cpp_python": L.__version__,
        "system_info": L.llama_print_system_info().decode("utf-8", "replace").strip(),
        "cpus": len(os.sched_getaffinity(0)), "host": platform.node(), "rows": rows, "failed": failed}, indent=1))
    print(f"\nwrote {args.out}")
    return 0 if rows and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
