"""Ingest the big archive as a user would, killed with SIGKILL along the way and resumed (issue 57, item 2).

`epi ingest ARCHIVE --store STORE --answer-model none --json` (the fast read) runs under `/usr/bin/time -v`. After
each delay in `--kill-after` (seconds from the run's start) the running ingest is killed with SIGKILL and the same
command is started again, as a user would after a crash; the last run goes to the end. Meanwhile `epi ls` is
sampled every `--sample` seconds, as a user would look. Everything lands in OUT:

- `run-N.jsonl`: the per-document records `--json` prints (tokens, seconds, stage_seconds), run N;
- `run-N.time`: `/usr/bin/time -v` of run N (peak RSS: "Maximum resident set size");
- `ls-samples.log`: each `epi ls` with the time it was taken;
- `summary.json`: wall time per run and in all, the kills, tokens and seconds by stage over all documents.

`check_resumed.py` then compares the documents the kills cut with an uninterrupted ingest of each.

    nohup python bench/archive/ingest_run.py --archive /work/archive-1m --store /work/epi-1m/store \
        --out /work/epi-1m/out --kill-after 900 2700 &
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


def epi_command(archive: Path, store: Path) -> list[str]:
    return [sys.executable, "-m", "episodic_cli", "ingest", str(archive), "--store", str(store),
            "--answer-model", "none", "--json"]


def sample_ls(store: Path, log: Path, every: float, stop: threading.Event) -> None:
    """`epi ls` every `every` seconds into `log`: what a user sees of the store while it is read."""
    while not stop.wait(every):
        out = subprocess.run([sys.executable, "-m", "episodic_cli", "ls", "--store", str(store)],
                             capture_output=True, text=True, env={**os.environ, "COLUMNS": "160"})
        with log.open("a") as f:
            f.write(f"===== {time.strftime('%Y-%m-%d %H:%M:%S')} rc={out.returncode}\n{out.stdout}{out.stderr}\n")


def ingest_hwm_kb(time_pid: int) -> int | None:
    """VmHWM of the ingest under `/usr/bin/time` (its child): a killed run leaves no `time -v` report, so the
    peak is sampled while it runs."""
    try:
        child = Path(f"/proc/{time_pid}/task/{time_pid}/children").read_text().split()[0]
        status = Path(f"/proc/{child}/status").read_text()
    except (OSError, IndexError):
        return None
    found = re.search(r"VmHWM:\s+(\d+) kB", status)
    return int(found.group(1)) if found else None


def run_once(n: int, archive: Path, store: Path, out: Path, kill_at: float | None) -> dict:
    """One ingest run; killed with SIGKILL at `kill_at` (perf_counter time) if it is still running then."""
    started = time.perf_counter()
    hwm = 0
    with (out / f"run-{n}.jsonl").open("w") as stdout, (out / f"run-{n}.stderr").open("w") as stderr:
        proc = subprocess.Popen(["/usr/bin/time", "-v", "-o", str(out / f"run-{n}.time"),
                                 *epi_command(archive, store)], stdout=stdout, stderr=stderr,
                                start_new_session=True)
        killed = False
        while proc.poll() is None:
            hwm = max(hwm, ingest_hwm_kb(proc.pid) or 0)
            if kill_at is not None and time.perf_counter() >= kill_at:
                os.killpg(proc.pid, signal.SIGKILL)  # the ingest under time, and time itself: a crash, not a stop
                proc.wait()
                killed = True
                break
            time.sleep(5)
    return {"run": n, "seconds": round(time.perf_counter() - started, 1), "killed": killed,
            "returncode": proc.returncode, "peak_rss_kb": peak_rss_kb(out / f"run-{n}.time"),
            "sampled_hwm_kb": hwm or None}


def peak_rss_kb(path: Path) -> int | None:
    try:
        found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", path.read_text())
    except OSError:
        return None
    return int(found.group(1)) if found else None


def stage_totals(out: Path) -> dict:
    """Tokens and seconds by stage over every document a run finished (a resumed document counts its last run's
    part only: the runs before the kill are in the wall time, not here)."""
    totals = {"documents": 0, "tokens": 0, "seconds": 0.0, "stage_seconds": {}}
    for path in sorted(out.glob("run-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by the kill
            if rec.get("status") != "ingested":
                continue
            totals["documents"] += 1
            totals["tokens"] += rec["tokens"]
            totals["seconds"] += rec["seconds"]
            for stage, s in rec.get("stage_seconds", {}).items():
                totals["stage_seconds"][stage] = totals["stage_seconds"].get(stage, 0.0) + s
    return totals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archive", type=Path, required=True)
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--kill-after", type=float, nargs="*", default=[900, 2700],
                    help="seconds from the start at which the running ingest is killed (default: 15 and 45 min)")
    ap.add_argument("--sample", type=float, default=600, help="seconds between `epi ls` samples")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    sampler = threading.Thread(target=sample_ls, args=(args.store, args.out / "ls-samples.log", args.sample, stop),
                               daemon=True)
    sampler.start()
    began = time.perf_counter()
    runs = []
    for n, delay in enumerate([*sorted(args.kill_after), None], 1):
        run = run_once(n, args.archive, args.store, args.out, None if delay is None else began + delay)
        runs.append(run)
        print(json.dumps(run), flush=True)
        if not run["killed"] and delay is not None:
            break  # it finished before this kill was due
    stop.set()
    summary = {"archive": str(args.archive), "store": str(args.store), "started": time.strftime("%Y-%m-%d"),
               "wall_seconds": round(time.perf_counter() - began, 1), "runs": runs, **stage_totals(args.out)}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
