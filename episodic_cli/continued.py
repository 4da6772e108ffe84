"""The conversation `epi ask --continue` follows up: the last turns asked with `epi ask` on a store, kept in epi's
data directory between commands (one file per store, readable by its owner only: questions can be private)."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from .engine.paths import data_dir

TURNS_KEPT = 2  # question/answer pairs a follow-up reads (`epi chat` too); a 135M model loses track beyond that


def _turns_path(store_dir: Path) -> Path:
    """A file per store, named by a hash of its resolved path (names made of the path's characters collided:
    /a_b, /a/b and '/a b' shared one file)."""
    resolved = str(store_dir.resolve())
    return data_dir() / "conversations" / f"{hashlib.sha256(resolved.encode()).hexdigest()[:24]}.json"


def remember(store_dir: Path, turns: list[dict[str, str]]) -> None:
    """Keep the conversation's last TURNS_KEPT pairs, replacing the file whole (an interrupted write leaves the
    turns before). Best effort: a read-only data directory only loses the follow-up."""
    path = _turns_path(store_dir)
    data = {"store": str(store_dir.resolve()), "turns": turns[-2 * TURNS_KEPT:]}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".turns-")  # created 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass


def last_turns(store_dir: Path) -> list[dict[str, str]] | None:
    """The turns kept for this store, or None when there are none (or they cannot be read)."""
    try:
        data = json.loads(_turns_path(store_dir).read_text(encoding="utf-8"))
        if data["store"] != str(store_dir.resolve()):
            return None
        turns = [{"role": str(t["role"]), "content": str(t["content"])} for t in data["turns"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return turns or None
