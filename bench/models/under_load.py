"""Ingest and answer speed with and without one competing CPU-bound process, for old and new thread settings.

llama.cpp's CPU backend in this build runs its worker threads under OpenMP (libgomp), whose threads spin at every
barrier before they sleep; with as many threads as cores, a thread that loses its core to another process stalls the
others at each of the hundreds of barriers per decode. This measures how much a second busy process costs:

- ingest tokens/s: the real ingest (surprise pass, segmentation, KV capture, embedding, commit) of one document of
  pydoc prose into a fresh store, as `epi ingest` reports it;
- answer tokens/s: greedy one-token decodes after a 512-token prompt in the answer context, the llama_decode call
  `epi ask` makes per answer token (a fixed count, so an early end of answer cannot skew the rate);

each idle and then with a `python -c 'while True: pass'` process running beside it (the order alternates by
repetition), for every setting in turn, in a fresh process per setting and repetition: OpenMP reads its settings
once, when llama.cpp loads. Settings:

- `old`: libgomp's built-in wait (GOMP_SPINCOUNT=300000, what an unset OMP_WAIT_POLICY means; epi before this
  change), one llama.cpp thread per core;
- `new`: epi's defaults now, nothing set in the environment;
- `passive`, `spin10k`, `threads1`: the other candidates (OMP_WAIT_POLICY=passive; GOMP_SPINCOUNT=10000; old wait
  with --threads 1), with `--settings`.

    python bench/models/under_load.py [--reps 3] [--settings old,new] [--ingest-chars 5000] [--decode-tokens 32]

Prints every measurement (with the 1-minute load average before it) and, per setting, the median idle and loaded
rates, their min-max, and loaded/idle.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from episodic_cli.engine.llama.backend import default_threads

CORES = default_threads()
SETTINGS = {  # name: (environment, --threads)
    "old": ({"GOMP_SPINCOUNT": "300000"}, CORES),
    "new": ({}, None),
    "gen-1": ({"GOMP_SPINCOUNT": "300000"}, None),
    "gen-1+passive": ({"OMP_WAIT_POLICY": "passive"}, None),
    "passive": ({"OMP_WAIT_POLICY": "passive"}, CORES),
    "spin10k": ({"GOMP_SPINCOUNT": "10000"}, CORES),
    "threads1": ({"GOMP_SPINCOUNT": "300000"}, 1),
}
OMP_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")
PROMPT_TOKENS = 512


def haystack(n_chars: int) -> str:
    """Real prose: CPython's pydoc_data topics (PSF License), as bench/ingest/ingest_throughput.py uses."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))[:n_chars]


# ------------------------------------------------------------------------------------------------- worker


class Burner:
    """One CPU-bound competitor for the duration of a measurement."""

    def __enter__(self) -> "Burner":
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.3)  # let it reach the run queue
        return self

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait()


def ingest_rate(ws, text_file: Path, root: Path, n: int) -> float:
    from episodic_cli.engine.ingest.segment import SegmentParams
    from episodic_cli.engine.documents.sources import discover

    ws.store_dir = root / f"store-{n}"
    params = SegmentParams()
    st = ws.store_for_writing(params)
    try:
        with st.writer():
            ingestor = ws.ingestor(st, params)
            try:
                [result] = list(ingestor.ingest(discover([text_file])))
            finally:
                ingestor.close()
    finally:
        st.close()
    assert result.status == "ingested", result
    return result.tokens_per_s


def decode_rate(session, prompt, n_tokens: int) -> float:
    import numpy as np

    session.clear()
    pos = session.prefill(prompt)
    t0 = time.perf_counter()
    for _ in range(n_tokens):
        token = int(np.argmax(session.last_logits()))
        session.decode(np.array([token], dtype=np.int32), pos)
        pos += 1
    return n_tokens / (time.perf_counter() - t0)


def worker(args: argparse.Namespace) -> None:
    from episodic_cli.engine.workspace import Workspace

    root = Path(tempfile.mkdtemp(prefix="epi-under-load-"))
    doc = root / "doc.txt"
    doc.write_text(haystack(args.ingest_chars), encoding="utf-8")
    ws = Workspace(threads=args.threads)
    ws.embedder.load(batches=True)
    session = ws.answerer("text").session
    prompt = ws.model.tokenize(haystack(20000))[:PROMPT_TOKENS]
    ingest_rate(ws, doc, root, 0)  # warm: first-use costs (torch kernels, page cache) stay out of the numbers
    out = {}
    for loaded in ((False, True) if args.rep % 2 == 0 else (True, False)):
        name = "loaded" if loaded else "idle"
        load = os.getloadavg()[0]
        if loaded:
            with Burner():
                out[f"ingest_{name}"] = ingest_rate(ws, doc, root, 1 + loaded)
                out[f"answer_{name}"] = decode_rate(session, prompt, args.decode_tokens)
        else:
            out[f"ingest_{name}"] = ingest_rate(ws, doc, root, 1 + loaded)
            out[f"answer_{name}"] = decode_rate(session, prompt, args.decode_tokens)
        out[f"load_{name}"] = load
    ws.close()
    print(json.dumps(out))


# ------------------------------------------------------------------------------------------------- parent


def run_setting(name: str, rep: int, args: argparse.Namespace) -> dict:
    env_extra, threads = SETTINGS[name]
    env = {k: v for k, v in os.environ.items() if k not in OMP_VARS}
    env.update(env_extra)
    cmd = [sys.executable, __file__, "--worker", "--rep", str(rep), "--ingest-chars", str(args.ingest_chars),
           "--decode-tokens", str(args.decode_tokens)]
    if threads or args.threads:
        cmd += ["--threads", str(threads or args.threads)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"worker for {name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summary(rows: dict[str, list[dict]]) -> None:
    def med(xs):
        return statistics.median(xs)

    print("\nsetting    what     idle tok/s (min-max)       loaded tok/s (min-max)     loaded/idle (per rep)")
    for name, runs in rows.items():
        for what in ("ingest", "answer"):
            idle = [r[f"{what}_idle"] for r in runs]
            loaded = [r[f"{what}_loaded"] for r in runs]
            ratios = [r[f"{what}_loaded"] / r[f"{what}_idle"] for r in runs]
            print(f"{name:10} {what:7} {med(idle):7.1f} ({min(idle):6.1f}-{max(idle):6.1f})   "
                  f"{med(loaded):7.1f} ({min(loaded):6.1f}-{max(loaded):6.1f})   "
                  f"{med(loaded) / med(idle):5.2f}x ({', '.join(f'{x:.2f}' for x in ratios)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--settings", default="old,new", help=f"comma-separated, from {', '.join(SETTINGS)}")
    ap.add_argument("--ingest-chars", type=int, default=5000, help="document size (about 4.5 characters a token)")
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads for every setting but threads1")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rep", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    names = args.settings.split(",")
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise SystemExit(f"unknown setting(s) {', '.join(unknown)}; use {', '.join(SETTINGS)}")
    print(f"{os.cpu_count()} CPUs; load average at start {os.getloadavg()[0]:.2f}; {args.reps} reps; "
          f"ingest {args.ingest_chars:,} characters, answer {args.decode_tokens} decodes after {PROMPT_TOKENS} tokens")
    rows: dict[str, list[dict]] = {n: [] for n in names}
    started = time.perf_counter()
    for rep in range(args.reps):
        order = names if rep % 2 == 0 else names[::-1]  # a slow spell of the machine hits every setting
        for name in order:
            r = run_setting(name, rep, args)
            rows[name].append(r)
            print(f"rep {rep} {name:9} ingest {r['ingest_idle']:6.1f} idle / {r['ingest_loaded']:6.1f} loaded; "
                  f"answer {r['answer_idle']:5.1f} idle / {r['answer_loaded']:5.1f} loaded tok/s "
                  f"(load avg {r['load_idle']:.2f} / {r['load_loaded']:.2f})", flush=True)
    summary(rows)
    print(f"\n{time.perf_counter() - started:.0f} s; load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
