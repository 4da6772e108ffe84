"""A store kept in step with folders as they change: `epi ingest PATH... --watch`.

watchfiles (Rust's notify: inotify, FSEvents, ReadDirectoryChangesW) reports what changed; what to do about it is
decided from the folder as it now is, not from the events' kinds, so a rename, a deleted folder, an editor's
save-by-rename and a file that became ignored all come out right: a file that discovery finds and that changed (or
that the store lacks) is ingested with the usual rules (unchanged content skipped, a changed file replaced, a long
one committed in groups), and a stored document under a watched path that discovery no longer finds is removed
with its events and KV blocks.

Plain engine module: no terminal output.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ...store import Store
from ..documents.sources import Skipped, discover

# Changes are gathered until none has come for this long, so a save that writes a file in several steps (or a
# `git checkout` of many files) is one batch.
DEBOUNCE_MS = 800


@dataclass
class Batch:
    found: list[tuple[Path, str] | Skipped]  # what to ingest (discovery's items for the touched files)
    removed: list[tuple[str, str]]           # (document key, display path) of stored documents that are gone


def watch_changes(paths: Iterable[Path], stop_event=None) -> Iterator[set[Path]]:
    """Batches of changed paths (resolved), as they happen; an empty set every second or so while nothing changes,
    the first one as soon as the watcher runs (changes from then on are never missed)."""
    import watchfiles

    roots = [str(Path(p).resolve()) for p in paths]
    for changes in watchfiles.watch(*roots, debounce=DEBOUNCE_MS, rust_timeout=1000, yield_on_timeout=True,
                                    stop_event=stop_event, raise_interrupt=True):
        yield {Path(path) for _change, path in changes}


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def plan(store: Store, paths: list[Path], touched: set[Path]) -> Batch:
    """What a batch of changed paths means for the store: the files to ingest and the documents to remove."""
    roots = [str(Path(p).resolve()) for p in paths]
    touched_s = [str(t) for t in touched]
    stored = {d.path: d.display_path for d in store.documents()}
    items = list(discover(paths))
    present = {str(item[0]) for item in items if not isinstance(item, Skipped)}
    found: list[tuple[Path, str] | Skipped] = []
    for item in items:
        if isinstance(item, Skipped):
            if not item.quiet and _under(str(Path(item.path).resolve()), touched_s):
                found.append(item)  # a file that changed into something epi cannot read says so
            continue
        key = str(item[0])
        # A file counts as changed when it or a folder above it was touched (a folder moved in brings its files).
        if key not in stored or any(key == t or key.startswith(t.rstrip(os.sep) + os.sep) for t in touched_s):
            found.append(item)
    removed = [(key, shown) for key, shown in stored.items() if _under(key, roots) and key not in present]
    return Batch(found, removed)
