"""The store's file locks, on filelock (flock on Unix, LockFileEx on Windows; the operating system releases a lock
when its process dies): the writer lock (`lock` in the store's folder, one writer at a time) and the KV space lock
(`kv/space.lock`, held while block files are written or removed). Both are exclusive: nothing in epi needs a shared
lock. store/ imports no fcntl, so it imports on Windows too."""
from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock, Timeout

LOCK_FILE_MODE = 0o644


def exclusive_lock(path: Path) -> FileLock:
    """An exclusive lock on the file `path` (created on first acquire). Re-entrant within the object: a nested
    acquire is counted and the outermost release unlocks the file, so `is_locked` before acquiring tells an outer
    acquire from a nested one. Shared by the object's threads (thread_local=False), like the counters it replaced;
    another object, in this process or another, is excluded."""
    return FileLock(os.fspath(path), mode=LOCK_FILE_MODE, thread_local=False)


def try_acquire(lock: FileLock) -> bool:
    """One attempt without waiting: whether `lock` is now held (once more, when this object already held it)."""
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return False
    return True
