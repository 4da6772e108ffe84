"""`epi ask` as a new user runs it: a fresh process per question, kv mode versus text mode, side by side.

bench/latency/kv_vs_text.py times the answer from the question on; this times what a person at the terminal waits for:
process start -> imports -> model, store and embedder -> retrieval -> first answer character on stdout, and the
whole command. The questions alternate between the modes so that both see the same machine state.

    python bench/latency/cli_latency.py [--store DIR] [--repeat 3] [--threads N]

Without --store, it first ingests 40,000 characters of CPython's reference prose (pydoc_data topics, PSF License)
with `epi ingest` into a temporary store.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ingest"))
from ingest_throughput import haystack  # noqa: E402

QUESTIONS = [
    "What do these passages say about the evaluation order of expressions?",
    "How does the for statement iterate over a sequence?",
    "What happens when an exception is raised inside a try clause?",
]


def epi(*args: str) -> list[str]:
    return [sys.executable, "-m", "episodic_cli", *args]


def timed_ask(store: Path, question: str, mode: str, threads: int | None) -> tuple[float, float, int]:
    """(seconds to the first answer character on stdout, seconds to exit, retrieved tokens). The whole command
    also depends on how long the answer is, which differs between the modes."""
    cmd = epi("ask", "--store", str(store), "--mode", mode, *(["--threads", str(threads)] if threads else []),
              question)
    with tempfile.TemporaryFile() as err_file:  # a file, not a pipe: stderr can never fill up and block the child
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err_file)
        first = None
        while chunk := proc.stdout.read1(4096):
            if first is None and chunk.strip():
                first = time.perf_counter() - t0
        code = proc.wait()
        err_file.seek(0)
        err = err_file.read()
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {err.decode(errors='replace').strip()}")
    total = time.perf_counter() - t0
    footer = next((line for line in err.decode().splitlines() if " retrieved tokens " in line), "")  # on stderr
    tokens = int(footer.split(" retrieved tokens")[0].split("·")[-1].strip().replace(",", "") or 0) if footer else 0
    return first if first is not None else total, total, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=None, help="an existing store (default: build one)")
    ap.add_argument("--repeat", type=int, default=3, choices=range(1, 100), metavar="N",
                    help="times each question is asked in each mode")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    store = args.store
    if store is None:
        tmp = Path(tempfile.mkdtemp(prefix="epi-cli-latency-"))
        doc, store = tmp / "topics.txt", tmp / "store"
        doc.write_text(haystack(40_000))
        threads = ["--threads", str(args.threads)] if args.threads else []
        subprocess.run(epi("ingest", "--store", str(store), *threads, str(doc)), check=True, capture_output=True)
    runs: dict[str, list[tuple[float, float, int]]] = {"kv": [], "text": []}
    for rep in range(args.repeat):
        for i, q in enumerate(QUESTIONS):
            order = ("kv", "text") if (rep + i) % 2 == 0 else ("text", "kv")  # neither mode always goes first
            for mode in order:
                runs[mode].append(timed_ask(store, q, mode, args.threads))
    print("| mode | runs | retrieved tokens (median) | first answer character, from process start (median s) "
          "| whole command (median s) |")
    print("|---|---|---|---|---|")
    med = {}
    for mode, rows in runs.items():
        med[mode] = [statistics.median(r[i] for r in rows) for i in range(3)]
        print(f"| {mode} | {len(rows)} | {med[mode][2]:.0f} | {med[mode][0]:.2f} | {med[mode][1]:.2f} |")
    print(f"\ntext / kv: first answer character {med['text'][0] / med['kv'][0]:.2f}x, whole command "
          f"{med['text'][1] / med['kv'][1]:.2f}x (above 1: kv mode is faster).")


if __name__ == "__main__":
    main()
