"""Ingest speed of EPUB, HTML and Word against the same text as a .txt file, side by side in one run (OCR's speed
and accuracy: bench/ingest/ocr_quality.py).

The text: CPython's pydoc topics (real prose with code), cut into chapters of paragraphs. Each format holds the same
chapters and paragraphs (tests/markup_fixtures.py writes them as a publisher's or Word's tools would). Each file is
ingested by `epi ingest FILE --answer-model none --json` into its own fresh store; tokens/s is the command's own
figure (the reading pass, model loading excluded). Rounds alternate the order of the formats; the best round of each
is kept, so a busy moment on the machine does not fall on one format only.

    python bench/ingest/formats_ingest.py [--chars 12000] [--rounds 4]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from markup_fixtures import make_docx, make_epub, make_html  # noqa: E402


def chapters(chars: int) -> list[tuple[str, list[str]]]:
    from pydoc_data.topics import topics

    paras = [" ".join(p.split()) for t in sorted(topics) for p in topics[t].split("\n\n") if len(p.split()) > 8]
    out, size = [], 0
    for i in range(1, 100):
        chunk = []
        while paras and sum(map(len, chunk)) < chars // 4:
            chunk.append(paras.pop(0))
        out.append((f"Chapter {i}: Part {i} of the reference", chunk))
        size += sum(map(len, chunk))
        if size >= chars or not paras:
            return out
    return out


def write_all(folder: Path, chs: list[tuple[str, list[str]]]) -> dict[str, Path]:
    txt = folder / "book.txt"
    txt.write_text("\n\n".join(f"{title}\n\n" + "\n\n".join(ps) for title, ps in chs) + "\n", encoding="utf-8")
    return {
        "txt": txt,
        "epub": make_epub(folder / "book.epub", chs),
        "html": make_html(folder / "book.html", "Reference", chs),
        "docx": make_docx(folder / "book.docx", "Reference", chs),
    }


def ingest(path: Path, store: Path) -> dict:
    env = {**os.environ, "EPI_MODEL": os.environ.get("EPI_MODEL", "smollm2")}
    done = subprocess.run([sys.executable, "-m", "episodic_cli", "ingest", str(path), "--store", str(store),
                           "--answer-model", "none", "--json"], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"ingest {path.name} failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chars", type=int, default=12_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/formats_ingest.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files = write_all(folder, chapters(args.chars))
        best: dict[str, dict] = {}
        names = list(files)
        for r in range(args.rounds):
            order = names if r % 2 == 0 else names[::-1]
            for name in order:
                rec = ingest(files[name], folder / f"store-{name}-{r}")
                if name not in best or rec["tokens_per_s"] > best[name]["tokens_per_s"]:
                    best[name] = rec
        base = best["txt"]["tokens_per_s"]
        print(f"{'format':<6} {'tokens':>7} {'tok/s':>7} {'vs .txt':>8}")
        for name in names:
            rec = best[name]
            rec["ratio_vs_txt"] = round(rec["tokens_per_s"] / base, 3)
            print(f"{name:<6} {rec['tokens']:>7,} {rec['tokens_per_s']:>7.1f} {rec['ratio_vs_txt']:>7.2f}x")

    args.out.write_text(json.dumps({"chars": args.chars, "rounds": args.rounds, "cpu_count": os.cpu_count(),
                                    "formats": best}, indent=1) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
