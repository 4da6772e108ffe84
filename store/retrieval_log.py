"""How often each event was retrieved: `epi warm` prepares the answer model's blocks for the most-asked-about events
first.

One text file beside the database, `retrievals.log`: each answer appends one line of the event ids it read. Appends
of a line are one `write` with O_APPEND, so concurrent asks need no lock and readers of the store can write it. The
counts are a hint for an order, never part of an answer: a damaged line is skipped, a read-only store records
nothing, and ids of events since removed simply match nothing. Past COMPACT_BYTES the file is rewritten as `id:count`
tokens (an append racing with that rewrite may be lost, which costs a count, not data).
"""
from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

LOG_NAME = "retrievals.log"
COMPACT_BYTES = 1 << 20  # ~10,000 answers of ~12 events before the file is rewritten as counts


def record(store_dir: Path, event_ids: Iterable[int]) -> None:
    """Append one answer's retrieved events; best effort (a read-only or full disk records nothing)."""
    line = " ".join(str(int(i)) for i in event_ids)
    if not line:
        return
    path = store_dir / LOG_NAME
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode("ascii"))
        finally:
            os.close(fd)
        if path.stat().st_size > COMPACT_BYTES:
            _compact(path)
    except OSError:
        pass


def counts(store_dir: Path) -> Counter[int]:
    """Times each event id was retrieved, as far as the log still says."""
    total: Counter[int] = Counter()
    try:
        data = (store_dir / LOG_NAME).read_bytes()
    except OSError:
        return total
    for token in data.decode("ascii", "replace").split():
        event_id, _, n = token.partition(":")
        try:
            total[int(event_id)] += int(n) if n else 1
        except ValueError:
            continue  # a damaged token: a count lost, nothing else
    return total


def _compact(path: Path) -> None:
    tally = counts(path.parent)
    tmp = path.with_name(f"{LOG_NAME}.{os.getpid()}.tmp")
    tmp.write_text(" ".join(f"{i}:{n}" for i, n in tally.most_common()) + "\n", encoding="ascii")
    os.replace(tmp, path)
