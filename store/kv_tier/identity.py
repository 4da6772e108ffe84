"""What a tier's blocks are valid for, and the key of each block.

A tier holds the KV blocks of one answer model: llama.cpp only loads a block into the very model file, build and
cache configuration that computed it, so a tier is keyed by all of them (docs/store-format.md, "KV blocks"). A block
is keyed by what it holds, not by the model: the document's content hash and the event's character span. The
archive's events are model-independent, so every tier names the same event's block the same way, and a block
computed again (a resumed ingest, a cold event prepared on use) lands on the same key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass

BLOCK_KINDS = ("f16", "q8_0", "q4_0")


@dataclass(frozen=True)
class TierConfig:
    model_name: str          # shown to people; the sha is what binds
    model_sha256: str
    llama_cpp_version: str
    type_k: str              # llama.cpp's cache types, and the flash-attention flag: blocks only load into the same
    type_v: str
    flash_attn: bool
    n_layer: int
    n_head_kv: int
    head_dim: int
    block_kind: str          # how the tier stores K and V rows: f16, q8_0 or q4_0

    def __post_init__(self) -> None:
        if self.block_kind not in BLOCK_KINDS:
            raise ValueError(f"unknown KV block kind {self.block_kind!r}; use one of {', '.join(BLOCK_KINDS)}")

    @property
    def tier_id(self) -> str:
        """The tier's directory name: readable model name, then a hash of everything that binds the blocks."""
        binding = {k: v for k, v in dataclasses.asdict(self).items() if k != "model_name"}
        digest = hashlib.sha256(json.dumps(binding, sort_keys=True).encode()).hexdigest()[:16]
        slug = re.sub(r"[^A-Za-z0-9]+", "-", self.model_name).strip("-")[:40] or "model"
        return f"{slug}-{self.block_kind}-{digest}"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "TierConfig":
        data = json.loads(text)
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})


def block_key(content_sha256: str, char_start: int, char_end: int) -> bytes:
    """16 bytes naming an event's block in every tier: the document's content and the event's character span."""
    return hashlib.sha256(f"{content_sha256}:{char_start}:{char_end}".encode()).digest()[:16]
