"""Whole ingest with 256-piece token windows against 160-word windows (what ingest used before issue 35, item 2),
side by side in one process: the same code files, the same reading model, fresh stores, rounds alternating the two
so that a change in the machine's load falls on both. Code is where the two differ most: a 160-word window of code is
often 400-600 word pieces, of which MiniLM read 256; token windows read them all, so they embed more.

    python bench/ingest/ingest_windows.py [--package pluggy] [--rounds 2]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
import time
from pathlib import Path

from ingest_throughput import ingest_rate

from episodic_cli.engine.embed.embedder import LEGACY_NAME
from episodic_cli.engine.llama.models import reader_model
from episodic_cli.engine.workspace import Workspace
from episodic_cli.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package", default="pluggy", help="an installed Python package whose .py files are ingested")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("bench/results/ingest_windows.json"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="epi-ingest-windows-"))
    source = Path(importlib.util.find_spec(args.package).origin).parent
    doc = tmp / f"{args.package}.py"  # one file: one document, so each round times the same single ingest
    doc.write_text("\n\n".join(p.read_text(encoding="utf-8") for p in sorted(source.glob("*.py"))))
    reader = reader_model(None)
    base = Workspace(reader, store=str(tmp / "unused"))
    embedders = {"tokens": base.embedder, "words": base.embedder.named(LEGACY_NAME)}
    base.embedder.embed_texts(["warm up"] * 4)
    load_before = os.getloadavg()
    rates: dict[str, list[float]] = {name: [] for name in embedders}
    order = [name for r in range(args.rounds) for name in (("tokens", "words") if r % 2 == 0 else ("words", "tokens"))]
    for i, name in enumerate(order):
        ws = Workspace(reader, store=str(tmp / f"store-{i}"))
        ws.__dict__.update(model=base.model, embedder=embedders[name])
        rate, _, events = ingest_rate(ws, doc, "q8_0")
        rates[name].append(rate)
        print(f"{name}: {rate:.1f} tokens/s ({events} events)", flush=True)
    with Store.open_existing(tmp / "store-0") as st:  # how many windows each way embeds for the events cut
        texts = [e.text for d in st.documents() for e in st.events_of(d.id)]
    windows = {name: sum(len(w) for w in e._windows_of(texts)) for name, e in embedders.items()}
    best = {name: max(values) for name, values in rates.items()}
    ratio = best["tokens"] / best["words"]
    load_after = os.getloadavg()
    print(f"\nbest of {args.rounds}: token windows {best['tokens']:.1f}, word windows {best['words']:.1f} tokens/s: "
          f"token windows at {ratio:.3f}x; windows for its {len(texts)} events: {windows} "
          f"(load {load_before[0]:.1f} -> {load_after[0]:.1f})")
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), "package": args.package,
                                    "chars": len(doc.read_text()), "reader": base.model.info.name, "rounds": rates,
                                    "best": best, "ratio_tokens_over_words": round(ratio, 3), "windows": windows,
                                    "load_before": load_before, "load_after": load_after}, indent=1))


if __name__ == "__main__":
    main()
