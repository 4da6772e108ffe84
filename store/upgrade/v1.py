"""Upgrade a format-1 store (one archive bound to one model, one append-only KV block file) to format 2 (a
model-independent archive plus per-model KV tiers), in place, without re-ingesting anything.

1. Every intact block of the old file is written into its model's tier (kv_tier), with the representative keys its
   event row held, while the store's budget allows (the rest become cold: prepared from text on first use). Damaged
   blocks are left out the same way.
2. One SQLite transaction: the identity becomes the archive's (embedder) with the old model recorded as segmenter of
   every document, the events' old block columns are cleared, the format becomes 2.
3. The old block file is deleted.
A crash before 2 leaves a format-1 store (the next open upgrades again; blocks already written are found in place);
a crash after 2 leaves an old block file that the next upgrade-free open deletes (`remove_v1_leftovers`).
"""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

from ..kv_tier import BlockType, KVSpace, TierConfig, block_key
from ..records import DEFAULT_KV_BUDGET_BYTES, StoreError
from ..kv_tier.rep_keys import decode_rep_keys
from .v1_blocks import BlockCorruptError, KVBlockReader

log = logging.getLogger(__name__)

_KIND_OF_TYPE = {BlockType.F16: "f16", BlockType.Q8_0: "q8_0", BlockType.Q4_0: "q4_0"}

def _v1_block_path(store_dir: Path, conn: sqlite3.Connection) -> Path:
    row = conn.execute("SELECT value FROM meta WHERE key = 'kv_block_generation'").fetchone()
    generation = 0 if row is None else int(row[0])
    return store_dir / "kv" / ("blocks.ekv" if generation == 0 else f"blocks.{generation}.ekv")


def remove_v1_leftovers(store_dir: Path) -> None:
    """Format-1 block files (kv/blocks*.ekv) left by an upgrade that crashed after its commit."""
    kv_dir = store_dir / "kv"
    if kv_dir.is_dir():
        for path in kv_dir.glob("blocks*.ekv"):
            path.unlink(missing_ok=True)


def upgrade_v1(store_dir: Path, conn: sqlite3.Connection) -> tuple[int, int]:
    """Upgrade in place; the caller holds the store's writer lock. Returns (blocks moved, blocks left cold)."""
    old = json.loads(conn.execute("SELECT value FROM meta WHERE key = 'identity'").fetchone()[0])
    segmenter = {k: old.get(k) for k in ("model_name", "model_sha256", "tokenizer_sha256")}
    label = f"{old.get('model_name')} {old.get('model_sha256')}"
    space = KVSpace(store_dir / "kv", DEFAULT_KV_BUDGET_BYTES)
    moved = cold = 0
    block_path = _v1_block_path(store_dir, conn)
    kinds: dict[str, int] = {}
    if block_path.is_file():
        try:
            reader = KVBlockReader(block_path)
        except StoreError as e:  # an unreadable old file: every event becomes cold, nothing is lost but speed
            log.warning("store %s: format-1 block file unreadable (%s); its events will be prepared on use", store_dir, e)
            reader = None
        if reader is not None:
            with reader:
                h = reader.header
                rows = conn.execute(
                    "SELECT e.ordinal, e.kv_offset, e.kv_length, e.rep_keys, e.char_start, e.char_end, d.content_sha256 "
                    "FROM events e JOIN documents d ON d.id = e.document_id WHERE e.kv_offset IS NOT NULL "
                    "ORDER BY e.kv_offset")
                for ordinal, offset, length, rep, c0, c1, sha in rows:
                    try:
                        block = reader.read(offset, event_id=ordinal, length=length)
                        rep_keys = decode_rep_keys(rep)
                    except (BlockCorruptError, StoreError):
                        cold += 1
                        continue
                    kind = _KIND_OF_TYPE[block.block_type]
                    config = TierConfig(model_name=str(old.get("model_name")), model_sha256=h.model_sha256,
                                        llama_cpp_version=h.llama_cpp_version, type_k=h.type_k, type_v=h.type_v,
                                        flash_attn=h.flash_attn, n_layer=h.n_layer, n_head_kv=h.n_head_kv,
                                        head_dim=h.head_dim, block_kind=kind)
                    admitted = space.tier(config).offer(block_key(sha, c0, c1), block.block_type, block.n_tokens,
                                                        block.payload, rep_keys, on_use=False)
                    if admitted.value in ("written", "present"):
                        moved += 1
                        kinds[kind] = kinds.get(kind, 0) + 1
                    else:
                        cold += 1
    identity = {"embedder": old["embedder"], "embed_dim": old["embed_dim"], "segmenter": segmenter,
                "segmentation": old.get("segmentation", {})}
    kind = max(kinds, key=kinds.get) if kinds else "q8_0"
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("UPDATE events SET kv_offset = NULL, kv_length = NULL, rep_keys = NULL "
                     "WHERE kv_offset IS NOT NULL OR rep_keys IS NOT NULL")
        conn.execute("UPDATE documents SET segmenter = ? WHERE segmenter IS NULL", (label,))
        conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", [
            ("identity", json.dumps(identity, sort_keys=True)), ("format_version", "2"),
            ("kv_budget_bytes", str(DEFAULT_KV_BUDGET_BYTES)), ("kv_block_kind", kind)])
        conn.execute("DELETE FROM meta WHERE key = 'kv_block_generation'")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    remove_v1_leftovers(store_dir)
    return moved, cold
