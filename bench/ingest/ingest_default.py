"""`epi ingest` as a user runs it, with and without preparing the answer model's blocks, side by side.

Two fresh stores, one after the other, the same text (CPython's pydoc topics): `epi ingest FILE` with the defaults
(the answer model, Qwen 1.5B where installed, reads and keeps its blocks in one pass, then writes the map; before
issue 36's one reader the bundled model read and the answer model prepared its blocks after) and `epi ingest FILE
--answer-model none` (the bundled model reading only). Wall time of each command as a process, its peak RSS from the operating system
(ru_maxrss of the child), and the ratio.

    python bench/ingest/ingest_default.py [--chars 20000]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(cmd: list[str], env: dict) -> tuple[float, int, str]:
    """Wall seconds, the child's peak RSS (KiB, as the kernel counts it) and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.strip()[-400:]}")
    return seconds, max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before), done.stdout


def fresh_home(prefix: str) -> tuple[Path, dict]:
    """A temporary folder with an EPI_HOME of its own whose cache is this machine's (the models already prepared),
    and the environment the commands run in (without EPI_MODEL: the defaults, as a new user has them)."""
    from episodic_cli.engine.paths import cache_dir

    root = Path(tempfile.mkdtemp(prefix=prefix))
    (root / "home").mkdir()
    (root / "home" / "cache").symlink_to(cache_dir(), target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k != "EPI_MODEL"}
    env["EPI_HOME"] = str(root / "home")
    return root, env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chars", type=int, default=20_000)
    ap.add_argument("--out", type=Path, default=Path("bench/results/ingest_default.json"))
    args = ap.parse_args(argv)
    from pydoc_data.topics import topics

    root, env = fresh_home("epi-ingest-default-")
    doc = root / "topics.txt"
    doc.write_text("\n\n".join(topics[k] for k in sorted(topics))[: args.chars], encoding="utf-8")
    epi = [sys.executable, "-m", "episodic_cli"]
    rows = {}
    for name, extra in (("reading only (--answer-model none)", ["--answer-model", "none"]), ("default", [])):
        seconds, rss, out = run([*epi, "ingest", str(doc), "--store", str(root / name.split()[0]), "--json", *extra],
                                env)
        lines = [json.loads(line) for line in out.splitlines() if line.strip()]
        tokens = sum(r.get("tokens", 0) for r in lines if "status" in r)
        warm = next((r for r in lines if "warm" in r), None)
        rows[name] = {"seconds": round(seconds, 1), "tokens": tokens, "tokens_per_s": round(tokens / seconds, 1),
                      "peak_rss_mb": round(rss / 1024), "warm": warm}
    fast, default = rows["reading only (--answer-model none)"], rows["default"]
    print("| ingest | seconds | tokens/s | peak RSS (MB) |\n|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['seconds']} | {r['tokens_per_s']} | {r['peak_rss_mb']:,} |")
    print(f"\ndefault / reading only: {default['tokens_per_s'] / fast['tokens_per_s']:.2f}x the tokens/s"
          f" (answer model's blocks: {default['warm']['events_kept'] if default['warm'] else 0} events)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": "python bench/ingest/ingest_default.py " + " ".join(argv or sys.argv[1:]),
                                    "date": time.strftime("%Y-%m-%d %H:%M"), "load_end": os.getloadavg(),
                                    "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
