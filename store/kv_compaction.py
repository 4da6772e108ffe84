"""Compaction of the append-only KV block file: what is wasted, when reclaiming it is worth a rewrite, and the copy of
the live blocks into a new file. The switch to the new file is the store's job (Store.compact_kv_blocks), because only
a SQLite transaction can make the new offsets and the new file current together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .kv_blocks import BlockCorruptError, KVBlockReader, KVBlockWriter

# Compaction reads and rewrites every live block, so it runs on its own (after `epi ingest`/`epi rm`) only when that
# at least halves the file, and never for waste too small to matter next to the blocks of one book (~12 KB/token).
AUTO_COMPACT_DEAD_FRACTION = 0.5
AUTO_COMPACT_MIN_DEAD_BYTES = 64 << 20


@dataclass(frozen=True)
class KVUsage:
    file_bytes: int  # the current block file on disk (0: the store has none)
    header_bytes: int
    block_bytes: int  # the blocks SQLite points to: what compaction copies

    @property
    def live_bytes(self) -> int:
        return self.header_bytes + self.block_bytes

    @property
    def dead_bytes(self) -> int:
        """Blocks of replaced or removed documents, and any torn tail: what compaction gives back."""
        return max(0, self.file_bytes - self.live_bytes)

    @property
    def worth_compacting(self) -> bool:
        dead = self.dead_bytes
        return dead > AUTO_COMPACT_MIN_DEAD_BYTES and dead > AUTO_COMPACT_DEAD_FRACTION * self.file_bytes


@dataclass(frozen=True)
class CompactionResult:
    bytes_before: int
    bytes_after: int
    blocks_kept: int
    blocks_dropped: int  # failed their check while being copied: those events are answered from their text

    @property
    def reclaimed_bytes(self) -> int:
        return self.bytes_before - self.bytes_after


@dataclass(frozen=True)
class LiveBlock:
    """An event's block as SQLite records it."""

    event_id: int
    ordinal: int  # what the block header names (blocks are captured before the event has an id)
    offset: int
    length: int


@dataclass
class CopiedBlocks:
    locations: dict[int, tuple[int, int]] = field(default_factory=dict)  # event id -> (offset, length) in the new file
    dropped: list[int] = field(default_factory=list)  # event ids whose block failed its check


def copy_live_blocks(source: Path, target: Path, blocks: Iterable[LiveBlock],
                     progress: Callable[[int], None] | None = None) -> CopiedBlocks:
    """Copy each block, verified (checksum, event, length), from `source` into a new file `target` with the same file
    header; the bytes of a block are unchanged, only its offset moves. `target` is durable (fsynced) on return.
    `progress(n)` is told the bytes of each block as it is done."""
    copied = CopiedBlocks()
    target.unlink(missing_ok=True)  # KVBlockWriter appends to an existing file; an orphan must not be kept
    with KVBlockReader(source) as reader, KVBlockWriter(target, reader.header) as writer:
        for block in blocks:
            try:
                data = reader.read(block.offset, event_id=block.ordinal, length=block.length)
            except BlockCorruptError:
                copied.dropped.append(block.event_id)
            else:
                copied.locations[block.event_id] = writer.append(data.event_id, data.block_type, data.n_tokens,
                                                                 data.payload)
            if progress is not None:
                progress(block.length)
    return copied
