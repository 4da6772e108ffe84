"""One real long ingest, end to end with the bundled model: throughput and memory over hours, killed and resumed.

Builds one text file of `--tokens` tokens (default 1M) by concatenating real files nobody on the team wrote (the
Python standard library's modules, in sorted order: a "concatenated corpus", the kind of single huge file a user
brings), then runs `epi ingest` on it in a subprocess and logs, every `--every` seconds, the tokens committed so
far (the last committed event's end, read from the store) and the ingest process's resident memory (VmRSS from
/proc). At `--kill-at` (a fraction of the tokens) the process is killed with SIGKILL and the same command started
again, which resumes from its last checkpoint. The log (JSON lines) and a summary go to `--out`: throughput over the
first and last 10% of the tokens, RSS over the run, the resume point.

    python bench/scale/long_run.py --tokens 1000000 --kill-at 0.4 --out bench/results/long_run.json
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import sysconfig
import time
from pathlib import Path


def concatenated_sources(lib: Path, n_chars: int, skip: tuple[str, ...] = ()) -> str:
    """The Python modules under `lib` in sorted order, each after a `# ===== path =====` line, up to `n_chars`
    characters (cut there); modules whose path has a part named in `skip` are left out."""
    parts, size = [], 0
    for source in sorted(lib.rglob("*.py")):
        if any(part in source.parts for part in skip):
            continue
        try:
            text = source.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        parts.append(f"# ===== {source.relative_to(lib)} =====\n{text}\n")
        size += len(parts[-1])
        if size >= n_chars:
            break
    return "".join(parts)[:n_chars]


def build_text(path: Path, tokens: int) -> None:
    """About `tokens` tokens (4 characters a token is close for code and prose with the bundled tokenizer): the
    standard library's modules, tests and installed packages left out."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    path.write_text(concatenated_sources(lib, 4 * tokens, skip=("test", "site-packages")), encoding="utf-8")


def committed_tokens(store: Path) -> int:
    db = store / "store.sqlite3"
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=5)
        row = conn.execute("SELECT COALESCE(MAX(token_end), 0) FROM events").fetchone()
        conn.close()
        return int(row[0])
    except sqlite3.Error:
        return -1


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the process so far (/proc/PID/stat fields 14 and 15): throughput per CPU second
    does not depend on what else the machine is running, unlike throughput per wall second."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return -1.0


def start(doc: Path, store: Path, log_file) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "episodic_cli", "ingest", str(doc), "--store", str(store)],
                            stdout=log_file, stderr=log_file)


def summarize(rows: list[dict], total: int) -> dict:
    def rate(lo: float, hi: float) -> float | None:
        inside = [r for r in rows if lo * total <= r["tokens"] <= hi * total and r["tokens"] > 0]
        if len(inside) < 2:
            return None
        first, last = inside[0], inside[-1]
        return (last["tokens"] - first["tokens"]) / max(last["t"] - first["t"], 1e-9)

    def rate_per_cpu(lo: float, hi: float) -> float | None:
        # Within one process only: CPU seconds restart from zero when the killed ingest is started again.
        inside = [r for r in rows if lo * total <= r["tokens"] <= hi * total and r["tokens"] > 0
                  and r.get("cpu_s", -1) >= 0]
        spans = {}
        for r in inside:
            spans.setdefault(r["pid"], []).append(r)
        tokens = sum(s[-1]["tokens"] - s[0]["tokens"] for s in spans.values())
        cpu = sum(s[-1]["cpu_s"] - s[0]["cpu_s"] for s in spans.values())
        return tokens / cpu if cpu > 0 else None

    def quarter(i: int) -> dict:
        # RSS while the ingest works (tokens already committed), by quarter of the document: flat means no growth.
        inside = sorted(r["rss_mb"] for r in rows
                        if i * total / 4 < r["tokens"] <= (i + 1) * total / 4 and r["rss_mb"] > 0)
        if not inside:
            return {}
        return {"min": inside[0], "median": inside[len(inside) // 2], "max": inside[-1]}

    rss = [r["rss_mb"] for r in rows if r["rss_mb"] > 0]
    first10, last10 = rate(0.0, 0.1), rate(0.9, 1.0)
    cpu_first10, cpu_last10 = rate_per_cpu(0.0, 0.1), rate_per_cpu(0.9, 1.0)
    return {"tokens": total, "first_10pct_tokens_per_s": first10, "last_10pct_tokens_per_s": last10,
            "last_over_first": None if not first10 or not last10 else last10 / first10,
            "first_10pct_tokens_per_cpu_s": cpu_first10, "last_10pct_tokens_per_cpu_s": cpu_last10,
            "last_over_first_per_cpu": None if not cpu_first10 or not cpu_last10 else cpu_last10 / cpu_first10,
            "rss_mb_min": min(rss, default=0), "rss_mb_max": max(rss, default=0),
            "rss_mb_median": sorted(rss)[len(rss) // 2] if rss else 0,
            "rss_mb_by_quarter": [quarter(i) for i in range(4)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--kill-at", type=float, default=0.4)
    ap.add_argument("--every", type=float, default=10.0)
    ap.add_argument("--root", type=Path, default=Path("/tmp/epi-long"))
    ap.add_argument("--out", type=Path, default=Path("bench/results/long_run.json"))
    args = ap.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    doc, store = args.root / "stdlib-concatenated.py.txt", args.root / "store"
    if not doc.exists():
        build_text(doc, args.tokens)
    rows: list[dict] = []
    events: list[dict] = []
    t0 = time.monotonic()
    with open(args.root / "ingest.log", "ab") as log_file:
        proc, killed = start(doc, store, log_file), False
        while True:
            time.sleep(args.every)
            tokens = committed_tokens(store)
            rows.append({"t": round(time.monotonic() - t0, 1), "tokens": tokens, "rss_mb": round(rss_mb(proc.pid), 1),
                         "cpu_s": round(cpu_seconds(proc.pid), 2), "pid": proc.pid})
            with open(args.root / "progress.jsonl", "a") as f:
                f.write(json.dumps(rows[-1]) + "\n")
            if proc.poll() is not None:
                events.append({"t": rows[-1]["t"], "event": "finished", "rc": proc.returncode})
                break
            if not killed and tokens >= args.kill_at * args.tokens:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                killed = True
                events.append({"t": rows[-1]["t"], "event": "killed", "committed_tokens": tokens})
                proc = start(doc, store, log_file)
                events.append({"t": rows[-1]["t"], "event": "restarted"})
    total = committed_tokens(store)
    result = {"document": str(doc), "events": events, "summary": summarize(rows, total), "rows": rows}
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
