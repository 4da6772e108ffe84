"""Peak memory of one default `epi ingest` (read, keep the blocks, write the map), as the operating system counts it
(`/usr/bin/time -v`, maximum resident set size), for this checkout and an earlier one side by side in one run.

    python bench/memory/ingest_peak_rss.py --file README.md --before /path/to/earlier/checkout [--chars 6000]

Each side ingests the same file (its first --chars characters) into a fresh temporary store with its own code
(PYTHONPATH set to that checkout). Prints both peaks and their ratio; writes bench/results/ingest_peak_rss.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def peak_kb(checkout: Path, document: Path, store: Path) -> tuple[int, float, dict]:
    """(peak RSS in kB, wall seconds, the map's JSON line) of `epi ingest document` run with `checkout`'s code."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    run = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "episodic_cli", "ingest", str(document),
                          "--store", str(store), "--json"], cwd=checkout, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"ingest failed with {checkout}:\n{run.stderr[-2000:]}")
    kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr).group(1))
    clock = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", run.stderr).group(1)
    seconds = sum(float(x) * 60 ** i for i, x in enumerate(reversed(clock.split(":"))))
    lines = [json.loads(x) for x in run.stdout.splitlines() if x.startswith("{")]
    return kb, seconds, next((x for x in lines if "map" in x), {})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", type=Path, required=True)
    ap.add_argument("--before", type=Path, required=True, help="a checkout of the earlier code")
    ap.add_argument("--chars", type=int, default=6000, help="ingest this many characters of the file")
    ap.add_argument("--out", type=Path, default=HERE.parent / "results" / "ingest_peak_rss.json")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        document = Path(tmp) / args.file.name
        document.write_text(args.file.read_text(encoding="utf-8")[:args.chars], encoding="utf-8")
        sides = {}
        for name, checkout in (("before", args.before.resolve()), ("after", HERE.parents[1])):
            kb, seconds, mapped = peak_kb(checkout, document, Path(tmp) / f"store-{name}")
            sides[name] = {"checkout": str(checkout), "peak_rss_mb": round(kb / 1024, 1), "wall_s": round(seconds, 1),
                           "map_written": mapped.get("written")}
            print(f"{name:>6}: peak RSS {kb / 1024:8.1f} MB, {seconds:6.1f} s, {mapped.get('written')} summaries")
    ratio = sides["after"]["peak_rss_mb"] / sides["before"]["peak_rss_mb"]
    print(f"after / before: {ratio:.2f}x")
    args.out.write_text(json.dumps({"file": str(args.file), "chars": args.chars, **sides,
                                    "ratio": round(ratio, 3)}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
