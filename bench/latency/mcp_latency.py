"""`epi mcp` against `epi ask`: the first answer token through the server, from the request, side by side with `epi
ask` as a fresh process from its start, on one store with the answer model's KV blocks present; then the server's
memory over many questions.

1. Latency: each question is asked both ways in turn (which goes first alternating): through a running `epi mcp`
   (stdio, the official `mcp` client; the time from sending `tools/call ask` to the first progress notification
   holding answer text, and to the result) and as `epi ask` (process start to the first answer character on
   stdout, and to its exit). The server answers one warm-up question first (not counted): it stays up, so its
   model load is paid once, which is the point.
2. Memory: --questions N questions (default 200) through the same server, its VmRSS and VmHWM (/proc) read after
   each; flat means the high-water mark after the last question within 10% of the one after the warm-up ones.

    python bench/latency/mcp_latency.py [--store DIR] [--model smollm2] [--repeat 2] [--questions 200] [--threads N]

Without --store it first ingests 40,000 characters (--chars) of CPython's reference prose (pydoc_data topics, PSF License)
with `epi ingest --answer-model MODEL --no-map` into a temporary store, so MODEL's blocks are there. Writes
bench/results/mcp_latency.json (or --out).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parents[2]
STATUS = "epi: "  # the server's status lines (mcp_server.STATUS); every other progress message is answer text

QUESTIONS = [
    "What do these passages say about the evaluation order of expressions?",
    "How does the for statement iterate over a sequence?",
    "What happens when an exception is raised inside a try clause?",
]
# The memory run cycles through these (different passages each), each asked with a varying tail.
MANY = QUESTIONS + [
    "What does the with statement do with a context manager?",
    "How are default parameter values evaluated?",
    "What is the difference between is and == in comparisons?",
    "How does a class definition create a class object?",
    "What does the global statement declare?",
    "How are keyword arguments matched to parameters in a call?",
    "What does the yield expression do inside a function?",
    "How does slicing work on sequences?",
    "What does the assert statement do when optimizations are on?",
    "How are augmented assignment statements evaluated?",
    "What is the lambda expression used for?",
    "How does the import statement find a module?",
    "What does the del statement remove?",
    "How do conditional expressions evaluate their operands?",
    "What methods make an object a context manager?",
    "How does the while statement decide when to stop?",
    "What does the nonlocal statement refer to?",
]
TAILS = ["", " Answer briefly.", " Cite the passage.", " Explain it simply."]


def haystack(n_chars: int) -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))[:n_chars]


def epi(*args: str) -> list[str]:
    return [sys.executable, "-m", "episodic_cli", *args]


def env() -> dict[str, str]:
    """This process's environment, with this checkout's code first on the path (the server's too)."""
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return out


def timed_cli_ask(store: Path, question: str, model: str, threads: int | None) -> tuple[float, float]:
    """(seconds from process start to the first answer character on stdout, seconds to exit)."""
    cmd = epi("ask", "--store", str(store), "--model", model, *(["--threads", str(threads)] if threads else []),
              question)
    with tempfile.TemporaryFile() as err_file:  # a file, not a pipe: stderr can never fill up and block the child
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err_file, env=env())
        first = None
        while chunk := proc.stdout.read1(4096):
            if first is None and chunk.strip():
                first = time.perf_counter() - t0
        code = proc.wait()
        total = time.perf_counter() - t0
        err_file.seek(0)
        err = err_file.read().decode(errors="replace")
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {err.strip()}")
    return (first if first is not None else total), total


async def timed_server_ask(session: ClientSession, question: str) -> tuple[float, float, dict]:
    """(seconds from the request to the first progress message holding answer text, to the result, the answer)."""
    first: list[float] = []
    t0 = time.perf_counter()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        if not first and message and message.strip() and not message.startswith(STATUS):
            first.append(time.perf_counter() - t0)

    result = await session.call_tool("ask", {"question": question}, progress_callback=on_progress)
    total = time.perf_counter() - t0
    if result.is_error:
        raise RuntimeError(f"the server's ask failed: {result.content[0].text}")
    return (first[0] if first else total), total, result.structured_content


def server_pid() -> int:
    """The `epi mcp` process this one started (stdio_client does not say)."""
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me and b"mcp" in cmdline and b"episodic_cli" in cmdline:
            return int(entry.name)
    raise RuntimeError("cannot find the epi mcp process")


def memory_kb(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def load_average() -> float:
    return os.getloadavg()[0]


async def run(args: argparse.Namespace, store: Path) -> dict:
    params = StdioServerParameters(command=sys.executable, env=env(), cwd=str(ROOT), args=[
        "-m", "episodic_cli", "mcp", "--store", str(store), "--model", args.model,
        *(["--threads", str(args.threads)] if args.threads else [])])
    started = time.perf_counter()
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            ready_s = time.perf_counter() - started
            pid = server_pid()
            warm_first, warm_total, _ = await timed_server_ask(session, MANY[-1])
            rows = []
            for rep in range(args.repeat):
                for i, q in enumerate(QUESTIONS):
                    order = ("server", "cli") if (rep + i) % 2 == 0 else ("cli", "server")
                    row = {"question": q, "load_average": round(load_average(), 2)}
                    for way in order:
                        if way == "server":
                            first, total, answer = await timed_server_ask(session, q)
                            row["server_first_s"], row["server_total_s"] = first, total
                            row["sources"] = len(answer["sources"])
                            row["server_engine_first_s"] = answer["timings"]["first_token_s"]
                        else:
                            row["cli_first_s"], row["cli_total_s"] = await asyncio.to_thread(
                                timed_cli_ask, store, q, args.model, args.threads)
                    rows.append(row)
                    print(f"  {q[:50]:50s} server {row['server_first_s']:.2f} s, epi ask {row['cli_first_s']:.2f} s",
                          file=sys.stderr, flush=True)
            latency = {
                way: {"first_median_s": round(statistics.median(r[f"{way}_first_s"] for r in rows), 3),
                      "total_median_s": round(statistics.median(r[f"{way}_total_s"] for r in rows), 3)}
                for way in ("server", "cli")}
            latency["ratio_first"] = round(latency["cli"]["first_median_s"] / latency["server"]["first_median_s"], 2)
            latency["server_engine_first_median_s"] = round(
                statistics.median(r["server_engine_first_s"] for r in rows), 3)

            samples = []
            warm_up = min(10, max(1, args.questions // 10))
            t0 = time.perf_counter()
            for n in range(args.questions):
                q = MANY[n % len(MANY)] + TAILS[(n // len(MANY)) % len(TAILS)]
                await timed_server_ask(session, q)
                samples.append({"question": n + 1, **memory_kb(pid)})
                if (n + 1) % 10 == 0:
                    print(f"  memory: {n + 1} questions, VmRSS {samples[-1]['VmRSS'] / 1024:.0f} MB, VmHWM "
                          f"{samples[-1]['VmHWM'] / 1024:.0f} MB", file=sys.stderr, flush=True)
            memory = {}
            if samples:
                base, last = samples[warm_up - 1], samples[-1]
                memory = {"questions": args.questions, "seconds": round(time.perf_counter() - t0, 1),
                          "after_question": warm_up, "hwm_after_warm_up_mb": round(base["VmHWM"] / 1024, 1),
                          "hwm_at_end_mb": round(last["VmHWM"] / 1024, 1),
                          "rss_after_warm_up_mb": round(base["VmRSS"] / 1024, 1),
                          "rss_at_end_mb": round(last["VmRSS"] / 1024, 1),
                          "hwm_growth": round(last["VmHWM"] / base["VmHWM"] - 1, 4),
                          "rss_max_mb": round(max(s["VmRSS"] for s in samples) / 1024, 1),
                          "rss_min_mb": round(min(s["VmRSS"] for s in samples[warm_up - 1:]) / 1024, 1),
                          "samples": samples}
    return {"server_ready_s": round(ready_s, 2), "warm_up": {"first_s": round(warm_first, 3),
                                                              "total_s": round(warm_total, 3)},
            "rows": rows, "latency": latency, "memory": memory}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=None, help="an existing store with MODEL's blocks (default: build one)")
    ap.add_argument("--model", default="smollm2", help="the answer model, both ways (default smollm2)")
    ap.add_argument("--repeat", type=int, default=2, help="times each latency question is asked each way")
    ap.add_argument("--questions", type=int, default=200, help="questions of the memory run (0: none)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--chars", type=int, default=40_000, help="characters of prose in the store it builds")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "mcp_latency.json")
    args = ap.parse_args()
    store = args.store
    if store is None:
        tmp = Path(tempfile.mkdtemp(prefix="epi-mcp-latency-"))
        doc, store = tmp / "topics.txt", tmp / "store"
        doc.write_text(haystack(args.chars))
        threads = ["--threads", str(args.threads)] if args.threads else []
        print(f"ingesting {doc} into {store} ...", file=sys.stderr, flush=True)
        subprocess.run(epi("ingest", "--store", str(store), "--answer-model", args.model, "--no-map", *threads,
                           str(doc)), check=True, capture_output=True, env=env())
    load_before = load_average()
    report = asyncio.run(run(args, store))
    report |= {"date": date.today().isoformat(), "model": args.model, "store": str(store),
               "chars": None if args.store else args.chars,
               "threads": args.threads, "cpus": os.cpu_count(), "machine": platform.machine(),
               "load_average_before": round(load_before, 2), "load_average_after": round(load_average(), 2),
               "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])}
    lat, mem = report["latency"], report["memory"]
    print("| way | runs | first answer token (median s) | whole answer (median s) |")
    print("|---|---|---|---|")
    print(f"| `epi mcp` (from the request) | {len(report['rows'])} | {lat['server']['first_median_s']:.2f} | "
          f"{lat['server']['total_median_s']:.2f} |")
    print(f"| `epi ask` (from process start) | {len(report['rows'])} | {lat['cli']['first_median_s']:.2f} | "
          f"{lat['cli']['total_median_s']:.2f} |")
    print(f"\nfirst answer token: the server {lat['ratio_first']:.2f}x sooner than `epi ask` "
          f"(the engine's own first token inside the server: {lat['server_engine_first_median_s']:.2f} s)")
    if mem:
        print(f"memory over {mem['questions']} questions: VmHWM {mem['hwm_after_warm_up_mb']:.0f} MB after "
              f"{mem['after_question']} -> {mem['hwm_at_end_mb']:.0f} MB at the end ({mem['hwm_growth']:+.1%}); "
              f"VmRSS {mem['rss_after_warm_up_mb']:.0f} -> {mem['rss_at_end_mb']:.0f} MB "
              f"(range {mem['rss_min_mb']:.0f}-{mem['rss_max_mb']:.0f})")
    print(f"load average {report['load_average_before']} before, {report['load_average_after']} after")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
