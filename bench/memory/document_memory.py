"""Memory of the document side of `epi ingest` on one long text, this tree against an earlier commit, side by side in
one run (issue 12, item 2: peak RSS must not grow with the document's length).

The document side is everything ingest does with a document's text apart from the model's pass over its tokens:
read and decode the file, count its tokens (the counting pass), tokenize it chunk by chunk while releasing what is
behind, and for each event take its text, its lines (citations) and its section (structure). Here the events are
cut every 256 tokens instead of by surprise, so that a 40 MB text is walked in minutes: the model's pass over ~11M
tokens would take ~a day on 2 cores, and its own memory was measured flat over 1.15M tokens (docs/benchmarks.md).

Each (tree, size) runs in its own process with the bundled model loaded (its tokenizer is the real one), started by
`/usr/bin/time -v`, whose "Maximum resident set size" is the peak RSS reported; the process's own VmHWM agrees. (Not
getrusage in a child forked from this runner: Linux carries the forking process's RSS high-water mark across exec
into the child's ru_maxrss, and this runner has just built a text of up to 160 MB.) RSS right after the model is
loaded is the floor the document adds to. The texts
are real and nobody on the team wrote them: the Python sources of this virtual environment's installed packages,
concatenated in sorted order, cut to each size at a line end, saved as .txt (plain-text headings are looked for).

    python bench/memory/document_memory.py --sizes 4,40 --before ddcef92 --out bench/results/document_memory.json
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / "scale"))
from long_run import concatenated_sources  # noqa: E402

EVENT_TOKENS = 256
GROUP = 64  # events per checkpoint group: what the pass releases tokens behind


def build_text(path: Path, n_chars: int) -> Path:
    text = concatenated_sources(Path(sysconfig.get_paths()["purelib"]), n_chars)
    path.write_text(text[: text.rfind("\n") + 1], encoding="utf-8")
    return path


def status_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def walk(doc_path: str, spool_dir: str) -> dict:
    """In the child: the document side of one ingest, with the tree on sys.path."""
    from episodic_cli.engine.heap import release_free_memory
    from episodic_cli.engine.documents.sources import load_document
    from episodic_cli.engine.ingest.token_stream import DocumentTokens
    from episodic_cli.engine.workspace import Workspace

    ws = Workspace()
    model = ws.model
    floor = status_mb()
    t0 = time.perf_counter()
    try:
        doc = load_document(Path(doc_path), spool_dir=Path(spool_dir))
    except TypeError:  # a tree from before spooling
        doc = load_document(Path(doc_path))
    after_load = status_mb()
    t1 = time.perf_counter()
    tokens = DocumentTokens(model, doc.text)
    t2 = time.perf_counter()
    n, events, kept_chars, lines, sections = len(tokens), 0, 0, 0, 0
    for a in range(0, n, EVENT_TOKENS):
        b = min(a + EVENT_TOKENS, n)
        tokens.tokens[a:b]  # noqa: B018 - what the pass feeds the model
        c0, c1 = int(tokens.offsets[a]), int(tokens.offsets[b])
        kept_chars += len(doc.text[c0:c1])
        _, _, line_start, line_end = doc.locate(c0, c1)
        lines = max(lines, line_end or 0)
        sections += doc.section(c0, c1) is not None
        events += 1
        if events % GROUP == 0:  # a committed group: the pass releases what is behind and trims the C heap
            tokens.release_before(b)
            release_free_memory()
    t3 = time.perf_counter()
    return {"tokens": n, "chars": len(doc.text), "events": events, "events_with_a_section": sections,
            "last_line": lines, "text_held": type(doc.text).__name__, "floor_rss_mb": round(floor, 1),
            "rss_after_load_mb": round(after_load, 1),
            "vm_hwm_mb": round(status_mb("VmHWM"), 1),
            "load_s": round(t1 - t0, 1), "count_s": round(t2 - t1, 1), "walk_s": round(t3 - t2, 1)}


def run_child(tree: Path, doc: Path, spool_dir: Path) -> dict:
    code = (f"import sys, json; sys.path.insert(0, {str(tree)!r}); sys.path.insert(1, {str(HERE)!r}); "
            f"import document_memory as m; print(json.dumps(m.walk({str(doc)!r}, {str(spool_dir)!r})))")
    out = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", code], cwd=tree, capture_output=True,
                         text=True)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1:] or [f"rc {out.returncode}"]}
    result = json.loads(out.stdout.strip().splitlines()[-1])
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr)
    return {**result, "peak_rss_mb": round(int(peak.group(1)) / 1024, 1) if peak else None}


def before_tree(rev: str, where: Path) -> Path:
    """A checkout of `rev` beside this one, with this tree's compiled kernels (native/ C unchanged between them)."""
    if not where.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), rev], check=True,
                       capture_output=True)
    for so in (ROOT / "native").glob("_kernels*.so"):
        target = where / "native" / so.name
        if not target.exists():
            target.write_bytes(so.read_bytes())
    return where


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="4,40", help="text sizes in millions of characters")
    ap.add_argument("--before", default=None, help="a commit to measure beside this tree (e.g. ddcef92)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/epi-document-memory"))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    sizes = [float(s) for s in args.sizes.split(",")]
    trees = [("this", ROOT)]
    if args.before:
        trees.insert(0, (args.before, before_tree(args.before, args.work / f"tree-{args.before}")))
    report = {"when": time.strftime("%Y-%m-%d %H:%M"), "load": os.getloadavg(), "event_tokens": EVENT_TOKENS,
              "runs": []}
    for size in sizes:
        doc = build_text(args.work / f"text-{size:g}M.txt", int(size * 1e6))
        for name, tree in trees:
            result = {"tree": name, "size_mchars": size, **run_child(tree, doc, args.work)}
            report["runs"].append(result)
            print(json.dumps(result), flush=True)
            if args.out:
                args.out.write_text(json.dumps(report, indent=1) + "\n")
    for name, _ in trees:
        runs = [r for r in report["runs"] if r["tree"] == name and "peak_rss_mb" in r]
        if len(runs) >= 2:
            small, large = runs[0], runs[-1]
            grow = (large["peak_rss_mb"] - large["floor_rss_mb"]) - (small["peak_rss_mb"] - small["floor_rss_mb"])
            print(f"{name}: {large['tokens'] / small['tokens']:.1f}x the tokens, peak RSS "
                  f"{small['peak_rss_mb']:.0f} -> {large['peak_rss_mb']:.0f} MB "
                  f"({large['peak_rss_mb'] / small['peak_rss_mb']:.3f}x); above the model's floor {grow:+.0f} MB")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
