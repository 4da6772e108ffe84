"""OCR of scanned pages: how many of a page's words come back, and how fast, for RapidOCR's settings.

Two sets of pages, image-only PDFs as a scanner makes them:
- "tuning" (used to choose the settings): CPython's pydoc topics drawn as text with Pillow (its default font and
  DejaVu Serif) at 150 dpi;
- "held-out" (not looked at while choosing): real PDF pages on this machine (the GNU Libtasn1 manual, the
  shared-mime-info spec) rendered by PDFium at 200 dpi, grey; the truth is each page's own text layer (pypdf).

Words are compared as lower-case letters and digits, as a multiset (a word found twice counts twice only if the
truth has it twice). Settings compared: RapidOCR's defaults (angle classifier on, unclip ratio 1.6), the ones
engine/documents/page_ocr.py uses (classifier off), and one tried and rejected (larger boxes, unclip 2.0).

Needs the `ocr` extra and, for the held-out pages, pypdfium2 (the `eval` extra).

    python bench/ingest/ocr_quality.py [--pages 6] [--out bench/results/ocr_quality.json]
"""
from __future__ import annotations

import argparse
import io
import json
import re
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from markup_fixtures import make_scanned_pdf  # noqa: E402

REAL_PDFS = [("/usr/share/doc/libtasn1-doc/libtasn1.pdf", range(4, 40)),
             ("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf", range(1, 20))]
DEJAVU = "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"


def words(text: str) -> Counter:
    return Counter(re.findall(r"\w+", text.lower()))


def tuning_pages(n: int, folder: Path) -> list[tuple[Path, str]]:
    from pydoc_data.topics import topics

    paras = [" ".join(p.split()) for t in sorted(topics) for p in topics[t].split("\n\n") if len(p.split()) > 8]
    out = []
    for i in range(n):
        text = "\n".join(textwrap.wrap(" ".join(paras[3 * i:3 * i + 3])[:1500], 64))
        font = DEJAVU if i % 2 and Path(DEJAVU).exists() else None
        out.append((make_scanned_pdf(folder / f"tune{i}.pdf", [text], font=font), text))
    return out


def held_out_pages(n: int, folder: Path) -> list[tuple[Path, str]]:
    import pypdfium2
    from pypdf import PdfReader

    out = []
    for path, pages in REAL_PDFS:
        if not Path(path).exists():
            continue
        reader, pdf = PdfReader(path), pypdfium2.PdfDocument(path)
        for p in pages:
            truth = reader.pages[p].extract_text() or ""
            if len(truth.split()) < 80:  # a title page or a figure: little to read
                continue
            image = pdf[p].render(scale=200 / 72).to_pil().convert("L")
            buffer = io.BytesIO()
            image.save(buffer, format="PDF", resolution=200)
            file = folder / f"real{len(out)}.pdf"
            file.write_bytes(buffer.getvalue())
            out.append((file, truth))
            if len(out) >= n * (1 + (path != REAL_PDFS[0][0])):
                break
    return out


def measure(pages: list[tuple[Path, str]], settings: dict) -> dict:
    import numpy as np
    from pypdf import PdfReader

    from episodic_cli.engine.documents import page_ocr

    engine = page_ocr._engine()
    found_words = total_words = 0
    t0 = time.perf_counter()
    for file, truth in pages:
        page = PdfReader(file).pages[0]
        texts = []
        for image in page.images:
            result, _ = engine(np.asarray(image.image.convert("RGB")), **settings)
            texts.append(page_ocr._lines(result))
        want, got = words(truth), words("\n".join(texts))
        found_words += sum(min(c, got[w]) for w, c in want.items())
        total_words += sum(want.values())
    seconds = time.perf_counter() - t0
    return {"pages": len(pages), "word_recall": round(found_words / total_words, 4),
            "pages_per_minute": round(60 * len(pages) / seconds, 1)}


def main() -> None:
    import tempfile

    from episodic_cli.engine.documents import page_ocr

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=6, help="pages per set (per real PDF for the held-out set)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/ocr_quality.json")
    args = ap.parse_args()
    if not page_ocr.available():
        raise SystemExit("the `ocr` extra is not installed: pip install 'epi[ocr]'")
    # the last: tried and rejected (it won on the tuning pages only)
    configs = {"rapidocr defaults": {}, "epi (page_ocr.SETTINGS)": dict(page_ocr.SETTINGS),
               "no classifier, unclip 2.0": {"use_cls": False, "unclip_ratio": 2.0}}
    results: dict = {"settings": {k: v for k, v in configs.items()}, "sets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        sets = {"tuning": tuning_pages(args.pages, Path(tmp)), "held-out": held_out_pages(args.pages, Path(tmp))}
        print(f"{'set':<9} {'settings':<26} {'pages':>5} {'words':>7} {'pages/min':>10}")
        for set_name, pages in sets.items():
            results["sets"][set_name] = {}
            for name, settings in configs.items():
                r = measure(pages, settings)
                results["sets"][set_name][name] = r
                print(f"{set_name:<9} {name:<26} {r['pages']:>5} {r['word_recall']:>6.1%} "
                      f"{r['pages_per_minute']:>10.1f}")
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
