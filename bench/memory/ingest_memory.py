"""Peak memory of `epi ingest` on single documents of increasing length, side by side in one run (issue 12, item 2).

Each document is a prefix of one real text nobody on the team wrote: the Python standard library's modules (tests
left out) concatenated in sorted order (bench/scale/long_run.py's text), cut at a line end. Every size is ingested into a
fresh store by `epi ingest DOC --json` in its own process under `/usr/bin/time -v` (peak RSS as the OS reports it),
while VmRSS is also read every `--every` seconds, so the growth inside one run shows too (RSS at the end against
RSS when the first quarter of the tokens were committed).

Two models: the bundled SmolLM2-135M on the shorter documents (~300 tokens/s on 2 idle cores), and the tiny
random-weight GGUF that tests/tiny_gguf.py writes (2 layers, SentencePiece-style vocabulary with byte fallback:
~0.8 tokens per character of this text, and much faster) on the long ones. The tiny model's tokens cost the same
embedding, store and segmentation work per token as the bundled model's; its own weights, KV blocks and context
are small, so its peak RSS is lower and its growth, if any, shows more plainly.

    python bench/memory/ingest_memory.py --out bench/results/ingest_memory.json
    python bench/memory/ingest_memory.py --tiny 125000,500000,2000000 --bundled 15000,60000 --out /tmp/x.json

Before each model's runs, one small untimed ingest prepares what a first use prepares (the bundled model's F16
form, hash memos), so that no measured run pays for it. Prints one line per run and, per model, the ratios of the
largest document to the smallest: tokens, peak RSS. The JSON is rewritten after every run.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scale"))
sys.path.insert(0, str(HERE.parents[1] / "tests"))

from long_run import build_text, committed_tokens, rss_mb  # noqa: E402


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def prefix_document(source: Path, size: int, path: Path) -> Path:
    """The first `size` characters of the source text, cut back to a line end."""
    text = source.read_text(encoding="utf-8")[:size]
    path.write_text(text[: text.rfind("\n") + 1] if "\n" in text else text, encoding="utf-8")
    return path


def ingest(doc: Path, store: Path, model: str | None, every: float, env: dict) -> dict:
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "episodic_cli", "ingest", str(doc), "--store", str(store),
           "--json"] + (["--model", model] if model else [])
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    samples: list[tuple[float, int, float]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(every):
            python = children(proc.pid)  # /usr/bin/time's child is epi
            if python:
                samples.append((time.monotonic() - started, committed_tokens(store), rss_mb(python[0])))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    stdout, stderr = proc.communicate()
    done.set()
    watcher.join()
    wall = time.monotonic() - started
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    results = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    tokens = sum(r.get("tokens", 0) for r in results)
    samples = [s for s in samples if s[2] > 0]  # the last read may come after the process ended
    quarter = [s for s in samples if 0 < s[1] <= tokens / 4]
    return {"rc": proc.returncode, "bytes": doc.stat().st_size, "tokens": tokens,
            "events": sum(r.get("events", 0) for r in results), "wall_s": round(wall, 1),
            "tokens_per_s": round(tokens / wall, 1) if wall else 0.0,
            "peak_rss_mb": round(int(peak.group(1)) / 1024, 1) if peak else None,
            "rss_at_first_quarter_mb": round(quarter[-1][2], 1) if quarter else None,
            "rss_last_sample_mb": round(samples[-1][2], 1) if samples else None,
            "samples": [(round(t, 1), n, round(r, 1)) for t, n, r in samples],
            "error": None if proc.returncode == 0 else stderr.strip().splitlines()[-1:]}


def parse_sizes(text: str) -> list[int]:
    """"125k,2m" -> [125000, 2000000]."""
    out = []
    for item in filter(None, (s.strip().lower() for s in text.split(","))):
        scale = 1e6 if item.endswith("m") else 1e3 if item.endswith("k") else 1
        out.append(int(float(item.rstrip("km")) * scale))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", default="125k,500k,2m", help="document sizes in characters for the tiny model")
    ap.add_argument("--bundled", default="16k,64k,256k", help="document sizes in characters for the bundled model")
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--root", type=Path, default=Path("/tmp/epi-ingest-memory"))
    ap.add_argument("--out", type=Path, default=Path("bench/results/ingest_memory.json"))
    args = ap.parse_args()
    from tiny_gguf import write_tiny_model

    args.root.mkdir(parents=True, exist_ok=True)
    source = args.root / "stdlib-concatenated.txt"
    if not source.exists():
        build_text(source, 1_000_000)  # 4 MB
    tiny = write_tiny_model(args.root / "tiny.gguf")
    env = {**os.environ, "EPI_HOME": str(args.root / "home")}
    plan = [("tiny", str(tiny), n) for n in parse_sizes(args.tiny)]
    plan += [("bundled", None, n) for n in parse_sizes(args.bundled)]
    runs = []
    warmed = set()
    for name, model, size in plan:
        if name not in warmed:  # first use of a model prepares it (F16 expansion, hashes): not what is measured
            warm = prefix_document(source, 4000, args.root / "warm-up.txt")
            subprocess.run(["rm", "-rf", str(args.root / "store-warm-up")], check=True)
            ingest(warm, args.root / "store-warm-up", model, args.every, env)
            warmed.add(name)
        doc = prefix_document(source, size, args.root / f"doc-{size}.txt")
        store = args.root / f"store-{name}-{size}"
        subprocess.run(["rm", "-rf", str(store)], check=True)
        run = {"model": name, **ingest(doc, store, model, args.every, env)}
        runs.append(run)
        print(f"{name:8} {run['bytes']:>10,} chars {run['tokens']:>10,} tokens {run['events']:>6,} events "
              f"{run['wall_s']:>8.1f} s {run['tokens_per_s']:>7.0f} tok/s  peak RSS {run['peak_rss_mb']} MB "
              f"(at 1/4 of the tokens {run['rss_at_first_quarter_mb']} MB, "
              f"last sample {run['rss_last_sample_mb']} MB)"
              f"{'  FAILED ' + str(run['error']) if run['rc'] else ''}", flush=True)
        write(args.out, runs, summarize(runs, quiet=True))
    write(args.out, runs, summarize(runs, quiet=False))


def write(out: Path, runs: list[dict], summary: dict) -> None:
    out.write_text(json.dumps({"when": time.strftime("%Y-%m-%d %H:%M"), "summary": summary, "runs": runs}, indent=1))


def summarize(runs: list[dict], quiet: bool) -> dict:
    summary = {}
    for name in ("tiny", "bundled"):
        mine = [r for r in runs if r["model"] == name and r["rc"] == 0 and r["peak_rss_mb"]]
        if len(mine) >= 2:
            small, large = mine[0], mine[-1]
            summary[name] = {"tokens_ratio": round(large["tokens"] / max(small["tokens"], 1), 2),
                             "peak_rss_ratio": round(large["peak_rss_mb"] / small["peak_rss_mb"], 3),
                             "peak_rss_mb": [r["peak_rss_mb"] for r in mine], "tokens": [r["tokens"] for r in mine]}
            if not quiet:
                print(f"{name}: largest/smallest document {summary[name]['tokens_ratio']}x the tokens, "
                      f"{summary[name]['peak_rss_ratio']}x the peak RSS ({small['peak_rss_mb']} -> "
                      f"{large['peak_rss_mb']} MB)")
    return summary


if __name__ == "__main__":
    main()
