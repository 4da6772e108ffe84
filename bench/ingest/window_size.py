"""Checkpoint window files: their size on a real ingest, with the cells the next batch's slide evicts removed first
(the default) and kept (`--keep-evicted`, what epi wrote before; issue 30, item 5).

A long text (the tests' text document and 30 x 120 prose lines) is ingested through the CLI in this process with the
bundled model, `--no-kv --commit-every 4`; every window file written is measured as it is written. Both runs'
events are compared: removing cells early must not change a single event.

    python bench/ingest/window_size.py --out bench/results/window_size.json
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from conftest import prose_lines, text_document  # noqa: E402


def run(root: Path, doc: Path, keep_evicted: bool) -> dict:
    from typer.testing import CliRunner

    from episodic_cli.app import app
    from episodic_cli.engine.ingest import document_pass
    from episodic_cli.engine.llama.backend import LlamaSession

    sizes: list[int] = []
    real_write = document_pass.write_snapshot

    def measured(path, blob):
        sizes.append(len(blob))
        return real_write(path, blob)

    document_pass.write_snapshot = measured
    real_evict = LlamaSession._evict_ahead
    if keep_evicted:
        LlamaSession._evict_ahead = lambda self, *a: None
    store = root / ("before" if keep_evicted else "after")
    try:
        t0 = time.perf_counter()
        result = CliRunner().invoke(app, ["ingest", str(doc), "--store", str(store), "--no-kv", "--commit-every", "4",
                                          "--json"])
        seconds = time.perf_counter() - t0
    finally:
        document_pass.write_snapshot = real_write
        LlamaSession._evict_ahead = real_evict
    if result.exit_code != 0:
        raise SystemExit(result.output)
    conn = sqlite3.connect(store / "store.sqlite3")
    events = conn.execute("SELECT ordinal, token_start, token_end, text FROM events ORDER BY ordinal").fetchall()
    tokens = conn.execute("SELECT n_tokens FROM documents").fetchone()[0]
    conn.close()
    return {"windows": len(sizes), "bytes_min": min(sizes), "bytes_max": max(sizes),
            "bytes_mean": round(sum(sizes) / len(sizes)), "document_tokens": tokens, "events": len(events),
            "seconds": round(seconds, 1), "_events": events}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="epi-window-"))
    os.environ.setdefault("EPI_HOME", str(root / "home"))
    os.environ["EPI_MODEL"] = "smollm2"
    doc = root / "long.md"
    doc.write_text(text_document() + "\n\n" + "\n".join(prose_lines(30, 120)), encoding="utf-8")
    from episodic_cli.engine.llama.models import bundled_model_path  # noqa: F401  (the model the CLI loads)

    before = run(root, doc, keep_evicted=True)
    after = run(root, doc, keep_evicted=False)
    per_cell = 2 * 30 * 3 * 64 * 2  # SmolLM2-135M: K and V x 30 layers x 3 KV heads x 64 values, F16
    out = {
        "per_cell_bytes": per_cell,
        "before": {k: v for k, v in before.items() if not k.startswith("_")},
        "after": {k: v for k, v in after.items() if not k.startswith("_")},
        "same_events": before["_events"] == after["_events"],
        "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"),
    }
    for side in ("before", "after"):
        out[side]["cells_max"] = round(out[side]["bytes_max"] / per_cell)
    out["ratio_max"] = round(after["bytes_max"] / before["bytes_max"], 3)
    print(json.dumps(out, indent=1))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
