"""Every KV tier of one store under one byte budget: accounting from the files, admission, LRU eviction, clean-up.

Layout under the store's `kv/` directory:

    kv/space.lock                     held while blocks are written or removed (any process, any tier; file_lock.py)
    kv/space.stamp                    rewritten after every change, so another process knows to count again
    kv/<tier_id>/tier.json            the tier's TierConfig (model, llama.cpp build, cache setup, block kind)
    kv/<tier_id>/seen                 keys of blocks refused once for lack of room (the admission filter)
    kv/<tier_id>/blocks/ab/<key>.ekvb one file per event block (block_file.py)

What is learnt from the systems that cache KV on disk for a living (research notes B):
- The bytes in use are the sizes of the block files, counted from the directory when this process first needs them and
  again whenever another process has changed something (the stamp); nothing is added up across runs, so nothing can
  drift (LMCache #4546). The budget is checked before each write, with the block's exact size, under the lock: the
  files never exceed it, not even while a block is written.
- Eviction removes whole files, least recently used first (a block's mtime is touched when an answer loads it), so the
  space returns to the filesystem at once (LMCache #1454: a cap that leaked).
- Admission: while the budget has room every block is kept. Once it is full, a block prepared for an answer is kept
  only from its second use (the first is remembered in `seen`), so one-off questions cannot flush the blocks that
  are used again and again (LMCache #4663); blocks captured by ingest never evict anything.
- A write never fills the disk: it is refused while less than DISK_RESERVE_BYTES would stay free.
"""

from __future__ import annotations

import errno
import heapq
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np

from ..file_lock import exclusive_lock
from .rep_keys import encoded_size
from .block_file import (
    BLOCK_SUFFIX,
    TMP_SUFFIX,
    BlockCorruptError,
    BlockType,
    StoredBlock,
    block_file_bytes,
    read_block_file,
    write_block_file,
)
from .identity import TierConfig

LOCK_NAME = "space.lock"
STAMP_NAME = "space.stamp"
TIER_FILE = "tier.json"
SEEN_FILE = "seen"
SEEN_LIMIT = 8192                 # remembered first uses per tier (a line of 33 bytes each)
DISK_RESERVE_BYTES = 1 << 30      # what a block write always leaves free on the filesystem


class Admission(Enum):
    WRITTEN = "written"
    PRESENT = "present"           # another process (or an earlier run) wrote the same block
    DEFERRED = "deferred"         # the budget is full: remembered, kept if it is used again
    NO_BUDGET = "no budget"       # larger than the room the budget can ever make, or ingest with a full budget
    NO_DISK = "no disk"           # the filesystem is (nearly) full
    GONE = "gone"                 # its document was removed meanwhile: nothing would name the block


@dataclass(frozen=True)
class TierUsage:
    tier_id: str
    config: TierConfig | None     # None: tier.json unreadable (its blocks still count)
    n_blocks: int
    bytes: int


@dataclass(frozen=True)
class BlockFile:
    tier_id: str
    key: bytes
    path: Path
    size: int
    mtime: float


class Tier:
    """One answer model's blocks in a KVSpace."""

    def __init__(self, space: "KVSpace", config: TierConfig):
        self.space = space
        self.config = config
        self.dir = space.kv_dir / config.tier_id

    def path_of(self, key: bytes) -> Path:
        name = key.hex()
        return self.dir / "blocks" / name[:2] / f"{name}{BLOCK_SUFFIX}"

    def read(self, key: bytes) -> StoredBlock | None:
        """The block, verified, or None when the tier does not hold it; BlockCorruptError when it is damaged."""
        try:
            return read_block_file(self.path_of(key), key)
        except FileNotFoundError:
            return None

    def touch(self, key: bytes) -> None:
        """Mark a block used now (its mtime is the LRU clock). Best effort: a read-only store just stops learning."""
        try:
            os.utime(self.path_of(key))
        except OSError:
            pass

    def offer(self, key: bytes, block_type: BlockType, n_tokens: int, payload: bytes | np.ndarray,
              rep_keys: np.ndarray | None, on_use: bool, live: Callable[[], bool] | None = None) -> Admission:
        """Keep a block if the budget allows (see the module docstring). `on_use`: prepared for an answer (may
        evict least recently used blocks once seen twice) rather than captured by ingest (never evicts). `live`,
        asked under the space's lock: whether the block's document is still in the store (an answer's block)."""
        return self.space._admit(self, key, block_type, n_tokens, payload, rep_keys, on_use, live)

    def discard(self, key: bytes) -> None:
        """Remove a block (a damaged one, before it is rebuilt)."""
        self.space._remove([self.path_of(key)])

    def _ensure_dir(self) -> None:
        record = self.dir / TIER_FILE
        if record.is_file():
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = record.with_name(f"{TIER_FILE}.{os.getpid()}{TMP_SUFFIX}")
        tmp.write_text(self.config.to_json())
        os.replace(tmp, record)

    def _seen_before(self, key: bytes) -> bool:
        """Whether this block was refused for room before; remembers it if not (bounded to SEEN_LIMIT keys)."""
        path = self.dir / SEEN_FILE
        name = key.hex()
        try:
            seen = path.read_text().split()
        except OSError:
            seen = []
        if name in seen:
            return True
        self._ensure_dir()
        if len(seen) >= SEEN_LIMIT:
            path.write_text("\n".join(seen[-SEEN_LIMIT // 2 :] + [name]) + "\n")
        else:
            with open(path, "a") as f:
                f.write(name + "\n")
        return False


class KVSpace:
    """The KV tiers of one store (`kv_dir`) under `budget_bytes` for all of them together."""

    def __init__(self, kv_dir: Path, budget_bytes: int | Callable[[], int]):
        self.kv_dir = Path(kv_dir)
        # A callable is asked at each write, under the lock: a long-running writer (an answer preparing blocks for
        # a minute) then honours a budget lowered meanwhile from its next block on, not the one it started with.
        self._budget_of = budget_bytes if callable(budget_bytes) else (lambda n=int(budget_bytes): n)
        self._used: int | None = None     # bytes of block files, counted from the files under the lock
        self._stamp_seen: bytes | None = None
        self._lock = exclusive_lock(self.kv_dir / LOCK_NAME)  # re-entrant within this object
        # Eviction order: a heap of (mtime, path), built from one scan when first needed and kept up to date by this
        # process (its writes pushed, touched files re-queued when popped); rebuilt when another process changed the
        # space. Scanning every file per eviction cost 1.3 s at 45,000 blocks (bench/kv/kv_space.py).
        self._lru: list[tuple[float, str]] | None = None
        # Temporary block files of interrupted writes (kill -9) this object removed, with their sizes: doctor says so.
        self.temporaries_removed: list[tuple[Path, int]] = []

    @property
    def budget(self) -> int:
        return int(self._budget_of())

    @budget.setter
    def budget(self, n_bytes: int) -> None:
        self._budget_of = lambda n=int(n_bytes): n

    def tier(self, config: TierConfig) -> Tier:
        return Tier(self, config)

    # -- accounting -----------------------------------------------------------------------------------------------

    def block_files(self) -> Iterator[BlockFile]:
        """Every block file of every tier (temporary files are not blocks)."""
        if not self.kv_dir.is_dir():
            return
        for tier_dir in sorted(p for p in self.kv_dir.iterdir() if p.is_dir()):
            blocks = tier_dir / "blocks"
            if not blocks.is_dir():
                continue
            for sub in sorted(blocks.iterdir()):
                if not sub.is_dir():
                    continue
                with os.scandir(sub) as entries:
                    for entry in entries:
                        if not entry.name.endswith(BLOCK_SUFFIX):
                            continue
                        try:
                            key = bytes.fromhex(entry.name[: -len(BLOCK_SUFFIX)])
                            st = entry.stat()
                        except (ValueError, FileNotFoundError):
                            continue
                        yield BlockFile(tier_dir.name, key, Path(entry.path), st.st_size, st.st_mtime)

    def _temporary_files(self) -> Iterator[Path]:
        if self.kv_dir.is_dir():
            yield from self.kv_dir.glob(f"*/blocks/*/*{TMP_SUFFIX}")

    def used_bytes(self) -> int:
        """Bytes of all block files, from the files (counted again when another process changed them)."""
        with self._locked():
            return self._used

    def usage(self) -> list[TierUsage]:
        """Per tier: its configuration, blocks and bytes (a fresh count, without the lock: for display)."""
        counts: dict[str, list[int]] = {}
        for f in self.block_files():
            c = counts.setdefault(f.tier_id, [0, 0])
            c[0] += 1
            c[1] += f.size
        tiers = []
        if self.kv_dir.is_dir():
            for tier_dir in sorted(p for p in self.kv_dir.iterdir() if p.is_dir()):
                try:
                    config = TierConfig.from_json((tier_dir / TIER_FILE).read_text())
                except (OSError, ValueError, KeyError, TypeError):
                    config = None
                n, size = counts.get(tier_dir.name, (0, 0))
                tiers.append(TierUsage(tier_dir.name, config, n, size))
        return tiers

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The space lock (re-entrant within this object); the count is refreshed whenever another process (or a
        crash) may have changed the files since this process last counted them."""
        if self._lock.is_locked:
            with self._lock:
                yield
            return
        # Not its parents: a store folder removed under a running job is not made again, blocks and all
        self.kv_dir.mkdir(exist_ok=True)
        with self._lock:  # waits while another process writes or removes blocks
            stamp = self._read_stamp()
            if self._used is None or stamp != self._stamp_seen:
                for tmp in self._temporary_files():  # a writer holds this lock while it writes: these are orphans
                    try:
                        size = tmp.stat().st_size
                        tmp.unlink()
                    except FileNotFoundError:
                        continue
                    self.temporaries_removed.append((tmp, size))
                self._used = sum(f.size for f in self.block_files())
                self._stamp_seen = stamp
                self._lru = None
            yield

    def _read_stamp(self) -> bytes | None:
        try:
            return (self.kv_dir / STAMP_NAME).read_bytes()
        except OSError:
            return None

    def _changed(self) -> None:
        """Tell other processes that their count is stale (best effort: a lost stamp only costs a recount)."""
        stamp = os.urandom(8).hex().encode()
        try:
            (self.kv_dir / STAMP_NAME).write_bytes(stamp)
            self._stamp_seen = stamp
        except OSError:
            self._stamp_seen = None

    # -- writing ----------------------------------------------------------------------------------------------------

    def _admit(self, tier: Tier, key: bytes, block_type: BlockType, n_tokens: int, payload: bytes | np.ndarray,
               rep_keys: np.ndarray | None, on_use: bool, live: Callable[[], bool] | None = None) -> Admission:
        payload_len = payload.nbytes if isinstance(payload, np.ndarray) else len(payload)
        size = block_file_bytes(payload_len, encoded_size(rep_keys))
        path = tier.path_of(key)
        with self._locked():
            # `rm` commits the removal, then collects its blocks under this lock: asked here, a removal committed
            # before is seen and one committed after collects what is written now, so no block outlives its document.
            if live is not None and not live():
                return Admission.GONE
            if path.exists():
                tier.touch(key)
                return Admission.PRESENT
            budget = self.budget  # the budget in force now (see __init__)
            if size > budget:
                return Admission.NO_BUDGET
            over = self._used + size - budget
            if over > 0:
                if not on_use:
                    return Admission.NO_BUDGET
                if not tier._seen_before(key):
                    return Admission.DEFERRED
                self._evict(over)
                if self._used + size > budget:
                    return Admission.NO_BUDGET
            if disk_free_bytes(self.kv_dir) - size < DISK_RESERVE_BYTES:
                return Admission.NO_DISK
            tier._ensure_dir()
            try:
                written = write_block_file(path, key, block_type, n_tokens, payload, rep_keys)
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    return Admission.NO_DISK
                raise
            self._used += written
            self._changed()
            if self._lru is not None:
                heapq.heappush(self._lru, (path.stat().st_mtime, str(path)))
            return Admission.WRITTEN

    def _evict(self, need: int) -> int:
        """Remove least recently used blocks until `need` bytes are free; returns the bytes removed."""
        if self._lru is None:
            self._lru = [(f.mtime, str(f.path)) for f in self.block_files()]
            heapq.heapify(self._lru)
        freed = 0
        victims = []
        while freed < need and self._lru:
            mtime, name = heapq.heappop(self._lru)
            try:
                st = os.stat(name)
            except FileNotFoundError:  # removed meanwhile (clean-up, a damaged block)
                continue
            if st.st_mtime != mtime:  # used since it was queued: it goes back in its new place
                heapq.heappush(self._lru, (st.st_mtime, name))
                continue
            victims.append(Path(name))
            freed += st.st_size
        return self._remove(victims)

    def _remove(self, paths: list[Path]) -> int:
        removed = 0
        with self._locked():
            for path in paths:
                try:
                    size = path.stat().st_size
                    path.unlink()
                except FileNotFoundError:
                    continue
                removed += size
            if removed:
                self._used -= removed
                self._changed()
        return removed

    def change_budget(self, n_bytes: int, record: Callable[[int], None]) -> int:
        """A new budget: evict down to it, then `record` it (where writers read it), both under the lock, so that no
        block is written in between and the files never exceed the budget in force; bytes removed."""
        with self._locked():
            over = self._used - n_bytes
            removed = self._evict(over) if over > 0 else 0
            record(n_bytes)
            return removed

    def over_budget(self) -> int:
        """Bytes the block files hold beyond the budget (0 when within it): left by an older epi, or a copy."""
        with self._locked():
            return max(0, self._used - self.budget)

    def shrink_to_budget(self) -> int:
        """After the budget was lowered: evict least recently used blocks until the files fit; bytes removed."""
        with self._locked():
            over = self._used - self.budget
            return self._evict(over) if over > 0 else 0

    def collect_garbage(self, live_keys: set[bytes]) -> tuple[int, int]:
        """Remove the blocks of events no longer in the archive (removed or replaced documents, an ingest that failed
        or was interrupted before it committed them); returns (blocks, bytes) removed."""
        with self._locked():
            dead = [f.path for f in self.block_files() if f.key not in live_keys]
            return len(dead), self._remove(dead)

    def verify(self, progress: Callable[[int], None] | None = None) -> list[tuple[BlockFile, str]]:
        """Read and check every block file; the damaged ones with the reason. `progress(bytes)` per block."""
        damaged = []
        for f in self.block_files():
            try:
                read_block_file(f.path, f.key)
            except BlockCorruptError as e:
                damaged.append((f, e.reason))
            except FileNotFoundError:  # evicted meanwhile
                pass
            if progress is not None:
                progress(f.size)
        return damaged

    def remove_files(self, files: list[BlockFile]) -> int:
        return self._remove([f.path for f in files])


def disk_free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free
