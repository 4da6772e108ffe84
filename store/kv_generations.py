"""Which KV block file of a store is current.

Compaction writes the live blocks into the file of the next generation and records that generation in `meta` in the
same SQLite transaction that rewrites every event's kv_offset, so SQLite alone says which file the offsets belong to.
A file of any other generation is a leftover of an interrupted compaction (never referenced) and may be deleted by
the holder of the store's writer lock.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

BLOCK_DIR = "kv"
GENERATION_KEY = "kv_block_generation"  # in `meta`; absent in stores never compacted, which means generation 0
_BLOCK_FILE = re.compile(r"blocks(?:\.(\d+))?\.ekv")


def block_file_name(generation: int) -> str:
    """Relative to the store directory; generation 0 keeps the name stores had before compaction existed."""
    return f"{BLOCK_DIR}/blocks.ekv" if generation == 0 else f"{BLOCK_DIR}/blocks.{generation}.ekv"


def recorded_generation(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (GENERATION_KEY,)).fetchone()
    return 0 if row is None else int(row[0])


def record_generation(conn: sqlite3.Connection, generation: int) -> None:
    """Inside the caller's transaction, together with the offsets that point into that generation's file."""
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (GENERATION_KEY, str(generation)))


def orphan_block_files(store_dir: Path, current: int) -> list[Path]:
    """Block files of generations other than `current`."""
    kv_dir = Path(store_dir) / BLOCK_DIR
    if not kv_dir.is_dir():
        return []
    orphans = []
    for entry in kv_dir.iterdir():
        match = _BLOCK_FILE.fullmatch(entry.name)
        if match and int(match.group(1) or 0) != current:
            orphans.append(entry)
    return sorted(orphans)
