"""Finding the GGUF models a user already has: Ollama's store, LM Studio's folder, the Hugging Face hub cache and the
folders named in epi's settings, each read where and as its own program lays it out (docs/usage.md, "Your own
model"). Nothing here ever writes to another program's store: files are only listed, stat'ed and read.

A found model has a name `--model` takes: Ollama's own (`qwen2.5:7b`, `library` and the default registry left out),
LM Studio's and the hub's `publisher/model` (with `/file` when the folder holds several GGUFs), a folder's file stem.
A name two stores share is refused with both qualified names (`ollama:NAME`, `lmstudio:NAME`, `hf:NAME`,
`folder:NAME`), which always pick one.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

OLLAMA, LMSTUDIO, HUB, FOLDER = "ollama", "lmstudio", "hf", "folder"
SOURCES = (OLLAMA, LMSTUDIO, HUB, FOLDER)
SOURCE_TITLES = {OLLAMA: "Ollama", LMSTUDIO: "LM Studio", HUB: "Hugging Face cache", FOLDER: "folder"}

OLLAMA_HOST = "registry.ollama.ai"
OLLAMA_NAMESPACE = "library"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
MAX_FOLDER_DEPTH = 4  # a configured folder is searched this deep for .gguf files


class ModelStoreError(ValueError):
    """A model store's entry that cannot be used; the message is one line saying what to do."""


@dataclass(frozen=True)
class FoundModel:
    source: str          # OLLAMA, LMSTUDIO, HUB, FOLDER
    name: str            # what --model takes
    path: Path | None    # the GGUF; None when the entry is broken (see `problem`)
    place: Path          # the store or folder it was found in
    problem: str | None = None  # why this entry cannot be used (a broken manifest, a missing blob)

    @property
    def qualified(self) -> str:
        return f"{self.source}:{self.name}"


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or env.get("USERPROFILE") or Path.home())


def ollama_places(env: Mapping[str, str] = os.environ) -> list[Path]:
    """OLLAMA_MODELS, else the user's ~/.ollama/models and the Linux service's (Ollama's FAQ on where models are)."""
    if env.get("OLLAMA_MODELS"):
        return [Path(env["OLLAMA_MODELS"]).expanduser()]
    return [_home(env) / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models"),
            Path("/var/lib/ollama/.ollama/models")]


def lmstudio_places(env: Mapping[str, str] = os.environ) -> list[Path]:
    """LM Studio's models folder (~/.lmstudio/models; ~/.cache/lm-studio/models on older installs)."""
    home = _home(env)
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def hub_places(env: Mapping[str, str] = os.environ) -> list[Path]:
    """The hub cache as huggingface_hub finds it: HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME or
    ~/.cache, then huggingface/hub."""
    if env.get("HF_HUB_CACHE"):
        return [Path(env["HF_HUB_CACHE"]).expanduser()]
    if env.get("HF_HOME"):
        return [Path(env["HF_HOME"]).expanduser() / "hub"]
    cache = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else _home(env) / ".cache"
    return [cache / "huggingface" / "hub"]


def _is_model_file(path: Path) -> bool:
    """A .gguf that is a model to list: not a vision projector (mmproj) beside a chat model, nor a split model's
    later part (llama.cpp loads a split model from its first, `-00001-of-N`)."""
    name = path.name.lower()
    if not name.endswith(".gguf") or "mmproj" in name:
        return False
    return "-of-0" not in name or "-00001-of-" in name


# -- Ollama ------------------------------------------------------------------------------------------------------

def ollama_short_name(host: str, namespace: str, model: str, tag: str) -> str:
    """Ollama's own way of naming a model: the default registry and namespace left out."""
    name = f"{model}:{tag}"
    if namespace != OLLAMA_NAMESPACE or host != OLLAMA_HOST:
        name = f"{namespace}/{name}"
    if host != OLLAMA_HOST:
        name = f"{host}/{name}"
    return name


def ollama_blob(root: Path, manifest: Path, name: str) -> Path:
    """The GGUF blob an Ollama manifest names; ModelStoreError when the manifest or its blob is not usable."""
    redo = f"run `ollama pull {name}` again"
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelStoreError(f"Ollama's manifest {manifest} cannot be read ({exc.strerror or exc}); {redo}") from None
    except ValueError as exc:
        raise ModelStoreError(f"Ollama's manifest {manifest} is not valid JSON ({exc}); {redo}") from None
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        raise ModelStoreError(f"Ollama's manifest {manifest} lists no layers; {redo}")
    digests = [layer.get("digest") for layer in layers
               if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_LAYER]
    if not digests or not isinstance(digests[0], str) or ":" not in digests[0]:
        raise ModelStoreError(f"Ollama's manifest {manifest} names no model layer; {redo}")
    algorithm, _, digest = digests[0].partition(":")
    blob = root / "blobs" / f"{algorithm}-{digest}"
    if not blob.is_file():
        raise ModelStoreError(f"Ollama's model {name} names blob {blob.name}, which is missing from {root / 'blobs'}; "
                              f"{redo}")
    return blob


def find_ollama(root: Path) -> Iterator[FoundModel]:
    manifests = root / "manifests"
    if not manifests.is_dir():
        return
    for manifest in sorted(manifests.glob("*/*/*/*")):
        if not manifest.is_file():
            continue
        host, namespace, model, tag = manifest.relative_to(manifests).parts
        name = ollama_short_name(host, namespace, model, tag)
        try:
            yield FoundModel(OLLAMA, name, ollama_blob(root, manifest, name), root)
        except ModelStoreError as exc:
            yield FoundModel(OLLAMA, name, None, root, str(exc))


# -- LM Studio, the hub cache, folders ---------------------------------------------------------------------------

def _named_files(prefix: str, files: list[Path]) -> Iterator[tuple[str, Path]]:
    """`prefix` for a folder's only model file; `prefix/stem` for each of several."""
    if len(files) == 1:
        yield prefix, files[0]
    else:
        for f in files:
            yield f"{prefix}/{f.stem}", f


def find_lmstudio(root: Path) -> Iterator[FoundModel]:
    """publisher/model/file.gguf, as LM Studio lays out its downloads (files straight in models/ it ignores too)."""
    if not root.is_dir():
        return
    for folder in sorted(p for p in root.glob("*/*") if p.is_dir()):
        files = sorted(f for f in folder.rglob("*.gguf") if _is_model_file(f))
        for name, path in _named_files(folder.relative_to(root).as_posix(), files):
            yield FoundModel(LMSTUDIO, name, path, root)


def _hub_snapshot(repo: Path) -> Path | None:
    """The snapshot refs/main points at, else the most recent one."""
    snapshots = repo / "snapshots"
    try:
        ref = (repo / "refs" / "main").read_text().strip()
        if ref and (snapshots / ref).is_dir():
            return snapshots / ref
    except OSError:
        pass
    found = sorted((p for p in snapshots.glob("*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def find_hub(root: Path) -> Iterator[FoundModel]:
    """models--org--repo/snapshots/<commit>/file.gguf (symlinks into blobs/)."""
    if not root.is_dir():
        return
    for repo in sorted(root.glob("models--*")):
        snapshot = _hub_snapshot(repo) if repo.is_dir() else None
        if snapshot is None:
            continue
        files = sorted(f for f in snapshot.rglob("*.gguf") if _is_model_file(f))
        repo_name = repo.name[len("models--"):].replace("--", "/")
        for name, path in _named_files(repo_name, files):
            if path.exists():  # a symlink whose blob was deleted
                yield FoundModel(HUB, name, path, root)


def find_in_folder(root: Path) -> Iterator[FoundModel]:
    """Every model file under a folder named in epi's settings, named by its stem."""
    if not root.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).relative_to(root).parts)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")) if depth < MAX_FOLDER_DEPTH else []
        for f in sorted(filenames):
            path = Path(dirpath) / f
            if _is_model_file(path):
                yield FoundModel(FOLDER, path.stem, path, root)


def find_models(folders: list[Path] | None = None, env: Mapping[str, str] = os.environ) -> list[FoundModel]:
    """Every model in every store this machine has, in the order SOURCES lists them."""
    found: list[FoundModel] = []
    seen_places: set[Path] = set()

    def each(places: list[Path], finder) -> None:
        for place in places:
            key = place.resolve() if place.exists() else place
            if key in seen_places:
                continue
            seen_places.add(key)
            try:
                found.extend(finder(place))
            except PermissionError:  # another user's store (the Linux service's): not ours to read
                continue

    each(ollama_places(env), find_ollama)
    each(lmstudio_places(env), find_lmstudio)
    each(hub_places(env), find_hub)
    each([Path(f).expanduser() for f in folders or []], find_in_folder)
    return found


def pick(found: list[FoundModel], name: str) -> FoundModel | None:
    """The model `name` names (qualified or not), None when none does; ModelStoreError when two stores share it or
    the one it names is broken."""
    source, _, rest = name.partition(":")
    if source in SOURCES and rest:
        matches = [m for m in found if m.source == source and m.name == rest]
    else:
        matches = [m for m in found if m.name == name]
        if not matches and ":" not in name:  # `qwen2.5` is Ollama's `qwen2.5:latest`
            matches = [m for m in found if m.source == OLLAMA and m.name == f"{name}:latest"]
    if not matches:
        return None
    distinct = {(m.source, m.path) for m in matches}
    if len(distinct) > 1:
        names = " and ".join(f"{m.qualified} ({m.path or m.place})" for m in matches)
        raise ModelStoreError(f"{name} is in two model stores: {names}; name one of them with its prefix")
    if matches[0].problem:
        raise ModelStoreError(matches[0].problem)
    return matches[0]
