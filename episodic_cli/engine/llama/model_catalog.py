"""`epi models`: every model epi can answer with, installed or found in another program's store, each described by
its GGUF header (model_facts.py) against this machine (memory, GPU offload) and the store's KV budget."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import llama_cpp as L

from .model_settings import load_settings
from .bundled import BUNDLED, assemble, is_installed
from .model_facts import NONE, ModelFacts, ModelFileError, machine_memory, read_model_facts
from .model_stores import FoundModel, find_models
from .models import BUNDLED_MODEL_NAME, answer_model, bundled_model_path

INSTALLED = "installed"


@dataclass(frozen=True)
class ModelEntry:
    source: str                 # INSTALLED or a model_stores source
    name: str                   # what --model takes
    qualified: str              # the name with its store's prefix (always unambiguous)
    path: Path | None
    facts: ModelFacts | None
    problem: str | None         # why it cannot be used at all (broken manifest, not a GGUF)
    is_default: bool

    @property
    def serving(self) -> str:
        return self.facts.serving if self.facts is not None else NONE

    @property
    def why(self) -> str | None:
        return self.problem or (self.facts.why if self.facts is not None else None)

    def as_json(self, kv_kind: str, kv_budget: int, memory: int, gpu: bool) -> dict:
        f = self.facts
        row = {"name": self.name, "qualified": self.qualified, "source": self.source,
               "path": str(self.path) if self.path else None, "default": self.is_default,
               "serving": self.serving, "why": self.why}
        if f is None:
            return row
        per_token = f.kv_bytes_per_token(kv_kind)
        needed = f.memory_needed(gpu=gpu)
        return {**row, "architecture": f.architecture, "parameters": f.n_params, "quantization": f.quantization,
                "file_bytes": f.file_bytes, "context_length": f.context_length, "chat_template": f.has_chat_template,
                "sliding_window": f.sliding_window, "kv_block_kind": kv_kind, "kv_bytes_per_token": per_token,
                "kv_budget_tokens": kv_budget // per_token if per_token else None,
                "memory_needed_bytes": needed, "machine_memory_bytes": memory,
                "fits_memory": not memory or needed <= memory, "gpu_offload": gpu}


def _entry(source: str, name: str, qualified: str, path: Path | None, problem: str | None, default: str
           ) -> ModelEntry:
    facts = None
    if path is not None and problem is None:
        try:
            facts = read_model_facts(path)
        except ModelFileError as exc:
            problem = f"{path} cannot be used: {exc}"
    is_default = default in (name, qualified) or (path is not None and default == str(path))
    return ModelEntry(source, name, qualified, path, facts, problem, is_default)


def installed_entries(default: str) -> list[ModelEntry]:
    """epi's own models: the bundled SmolLM2 and each answer model whose packages are installed."""
    rows = [_entry(INSTALLED, BUNDLED_MODEL_NAME, BUNDLED_MODEL_NAME, bundled_model_path(), None, default)]
    for name, model in BUNDLED.items():
        if is_installed(model):
            rows.append(_entry(INSTALLED, name, name, assemble(model), None, default))
    return rows


def found_entry(found: FoundModel, default: str) -> ModelEntry:
    return _entry(found.source, found.name, found.qualified, found.path, found.problem, default)


def list_models() -> list[ModelEntry]:
    """Installed models first, then each store's in the order model_stores.SOURCES lists them."""
    default = answer_model()
    folders = [Path(f) for f in load_settings().model_folders]
    return installed_entries(default) + [found_entry(m, default) for m in find_models(folders)]


def machine() -> dict:
    """What the listing measures models against."""
    return {"memory_bytes": machine_memory(), "gpu_offload": bool(L.llama_supports_gpu_offload())}
