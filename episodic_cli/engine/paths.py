"""Where epi keeps its data: EPI_HOME overrides the platform's user directories (tests point it at a tmpdir)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import platformdirs

from .errors import EpiError

DEFAULT_STORE = "default"


def data_dir() -> Path:
    home = os.environ.get("EPI_HOME")
    return Path(home).expanduser() / "data" if home else Path(platformdirs.user_data_dir("epi"))


def cache_dir() -> Path:
    home = os.environ.get("EPI_HOME")
    return Path(home).expanduser() / "cache" if home else Path(platformdirs.user_cache_dir("epi"))


def store_path(store: str | None) -> Path:
    """--store NAME lives under the data directory; --store PATH (anything with a slash, or ~) is used as given."""
    name = store or os.environ.get("EPI_STORE") or DEFAULT_STORE
    if "/" in name or os.sep in name or name.startswith("~") or name.startswith("."):
        return Path(name).expanduser().resolve()
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        raise EpiError(f"invalid store name {name!r}: use letters, digits, '-', '_' or '.', or give a path")
    return data_dir() / "stores" / name
