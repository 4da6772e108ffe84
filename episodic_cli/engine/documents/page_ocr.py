"""Text for a PDF page that has none (a scan): the page's images read by OCR, offline.

RapidOCR (rapidocr-onnxruntime: PaddleOCR's detection and recognition models in ONNX, shipped inside the package,
run by onnxruntime on the CPU) is the `ocr` extra, which ./install.sh installs; docs/usage.md ("Scanned PDFs")
says why it was chosen and what it costs. Without it, a scanned page is reported, never dropped silently.

Plain engine module: no terminal output.
"""
from __future__ import annotations

import hashlib
import logging
from functools import lru_cache
from pathlib import Path

from ..errors import EpiError

OCR_HINT = "install OCR with `pip install 'epi[ocr]'` (./install.sh does) and ingest it again"
# rapidocr-onnxruntime 1.4.4's models (pyproject.toml pins that version): checked before first use, as every model
# epi runs is.
MODEL_SHA256 = {
    "ch_PP-OCRv4_det_infer.onnx": "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
    "ch_PP-OCRv4_rec_infer.onnx": "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
}


# How RapidOCR is run: without its angle classifier, which turned upright lines upside down and lost them (words
# read back 83.7% -> 87.7% on real pages not used to choose it; bench/ingest/ocr_quality.py, docs/benchmarks.md "Formats").
SETTINGS = {"use_cls": False}


class OcrModelError(EpiError):
    """An OCR model file is missing or is not the one the pinned package ships."""


def check_models(directory: Path) -> None:
    for name, expected in MODEL_SHA256.items():
        path = directory / name
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            digest = None
        if digest != expected:
            why = "is missing" if digest is None else "differs from the pinned release"
            raise OcrModelError(f"OCR model {name} {why}; reinstall it with "
                                "`pip install --force-reinstall 'rapidocr-onnxruntime==1.4.4'`")


@lru_cache(maxsize=1)
def _engine():
    """The OCR engine, loaded once per process (~0.3 s) after its models' hashes are checked; None when the `ocr`
    extra is not installed."""
    try:
        import rapidocr_onnxruntime
        from rapidocr_onnxruntime import RapidOCR
    except ImportError:
        return None
    check_models(Path(rapidocr_onnxruntime.__file__).parent / "models")
    logging.getLogger("RapidOCR").setLevel(logging.ERROR)  # it logs each model it loads
    return RapidOCR()


def available() -> bool:
    return _engine() is not None


def _lines(found) -> str:
    """RapidOCR's boxes (corners, text, score), top to bottom, as lines: boxes whose vertical centres lie within half
    a box height of each other are one line, read left to right."""
    boxes = []
    for corners, text, _score in found or []:
        ys = [p[1] for p in corners]
        xs = [p[0] for p in corners]
        boxes.append(((min(ys) + max(ys)) / 2, max(ys) - min(ys), min(xs), text.strip()))
    boxes.sort()
    lines: list[list[tuple[float, str]]] = []
    last_y, last_h = None, 0.0
    for y, h, x, text in boxes:
        if not text:
            continue
        if last_y is not None and abs(y - last_y) <= max(h, last_h) / 2:
            lines[-1].append((x, text))
        else:
            lines.append([(x, text)])
            last_y, last_h = y, h
    return "\n".join(" ".join(t for _, t in sorted(line)) for line in lines)


def read_page(page) -> str:
    """The text of a pypdf page's images, in order ("" when it has none or OCR finds no text). Raises RuntimeError
    when OCR is not installed."""
    engine = _engine()
    if engine is None:
        raise RuntimeError(OCR_HINT)
    import numpy as np

    texts = []
    for image in page.images:
        picture = image.image
        if picture is None:
            continue
        found, _ = engine(np.asarray(picture.convert("RGB")), **SETTINGS)
        text = _lines(found)
        if text:
            texts.append(text)
    return "\n".join(texts)
