"""Where `epi ingest`'s resident memory goes as a long document is read: a diagnostic, not a benchmark.

Runs `epi ingest` in this process (the CLI's own entry point, so the same code path) and, from a second thread,
samples every `--every` seconds: VmRSS; /proc/self/smaps_rollup's anonymous and file-backed parts; glibc's
mallinfo2 (bytes in use by malloc, free bytes kept inside its heaps, bytes in mmapped chunks, number of arenas by
their top pads); the committed tokens (from the store); and with `--tracemalloc` the Python allocations in use and,
at the end, the sites that grew most between the first and the last sample. Each sample is one JSON line in
`--out`. `--trim` calls malloc_trim(0) before each sample (does the memory go back to the OS when asked?).

    python bench/memory/ingest_rss_causes.py DOC --model tiny.gguf --out /tmp/logs/rss/probe.jsonl [--tracemalloc]

Environment variables such as MALLOC_ARENA_MAX or MALLOC_MMAP_THRESHOLD_ are glibc's own and can be set around it.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
import threading
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scale"))
from long_run import committed_tokens  # noqa: E402


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


LIBC = ctypes.CDLL("libc.so.6")
LIBC.mallinfo2.restype = MallInfo2
MB = 2**20


def smaps_rollup() -> dict:
    fields = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        fields[key] = int(value.split()[0]) * 1024
    return fields


def vm_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def sample(store: Path, t0: float, trim: bool) -> dict:
    if trim:
        LIBC.malloc_trim(0)
    rollup = smaps_rollup()
    info = LIBC.mallinfo2()
    row = {"t": round(time.monotonic() - t0, 1), "tokens": committed_tokens(store), "rss_mb": vm_rss() / MB,
           "anon_mb": rollup.get("Anonymous", 0) / MB,
           "file_mb": (rollup.get("Rss", 0) - rollup.get("Anonymous", 0)) / MB,
           "malloc_in_use_mb": info.uordblks / MB, "malloc_free_kept_mb": info.fordblks / MB,
           "malloc_heap_mb": info.arena / MB, "malloc_mmapped_mb": info.hblkhd / MB, "mmapped_chunks": info.hblks}
    if tracemalloc.is_tracing():
        row["python_mb"] = tracemalloc.get_traced_memory()[0] / MB
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("document", type=Path)
    ap.add_argument("--model", default=None)
    ap.add_argument("--store", type=Path, default=Path("/tmp/epi-rss/store"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/epi-rss/probe.jsonl"))
    ap.add_argument("--every", type=float, default=10.0)
    ap.add_argument("--tracemalloc", action="store_true")
    ap.add_argument("--trim", action="store_true")
    ap.add_argument("--no-kv", action="store_true")
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    from episodic_cli.app import app

    if args.tracemalloc:
        tracemalloc.start(8)
    done = threading.Event()
    t0 = time.monotonic()
    snapshots = []

    def watch() -> None:
        with open(args.out, "w") as out:
            while not done.wait(args.every):
                out.write(json.dumps(sample(args.store, t0, args.trim)) + "\n")
                out.flush()
                if args.tracemalloc and (not snapshots or len(snapshots) == 1):
                    snapshots.append(tracemalloc.take_snapshot())
                elif args.tracemalloc:
                    snapshots[1] = tracemalloc.take_snapshot()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    argv = ["ingest", str(args.document), "--store", str(args.store), "--json"]
    argv += ["--model", args.model] if args.model else []
    argv += ["--no-kv"] if args.no_kv else []
    try:
        app(argv, standalone_mode=False)
    finally:
        done.set()
        watcher.join()
    with open(args.out, "a") as out:
        out.write(json.dumps({"final": sample(args.store, t0, args.trim)}) + "\n")
        if len(snapshots) == 2:
            for stat in snapshots[1].compare_to(snapshots[0], "traceback")[:12]:
                out.write(json.dumps({"grew_kb": round(stat.size_diff / 1024), "count": stat.count_diff,
                                      "where": [f"{f.filename}:{f.lineno}" for f in stat.traceback][-4:]}) + "\n")


if __name__ == "__main__":
    main()
