"""The user's model settings, beside the stores (not in one): the default answer model and the folders searched for
models (`epi config --answer-model NAME`, `--model-folder PATH`). One JSON file in the data directory, replaced
whole on each change so that a reader never sees half of one."""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import EpiError
from ..paths import data_dir


@dataclass
class UserSettings:
    answer_model: str | None = None  # --model's default after EPI_MODEL (None: the installed default)
    model_folders: list[str] = field(default_factory=list)


def settings_path() -> Path:
    return data_dir() / "settings.json"


def load_settings() -> UserSettings:
    path = settings_path()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return UserSettings()
    except (OSError, ValueError) as exc:
        raise EpiError(f"epi's settings file {path} cannot be read ({exc}); fix or delete it") from None
    if not isinstance(raw, dict):
        raise EpiError(f"epi's settings file {path} is not a JSON object; fix or delete it")
    folders = raw.get("model_folders") or []
    return UserSettings(raw.get("answer_model") if isinstance(raw.get("answer_model"), str) else None,
                        [str(f) for f in folders] if isinstance(folders, list) else [])


def save_settings(settings: UserSettings) -> None:
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".settings.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(asdict(settings), f, indent=1)
    os.replace(tmp, path)
