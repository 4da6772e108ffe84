"""The KV cache tier: per answer model, the events' KV blocks (and their representative keys) under the store's disk
budget. The archive (documents, events, embeddings, lexical index) never depends on it: a missing block is prepared
from the event's text on first use (engine/answer/kv_mode.py) and offered back to the tier.

Like the rest of store/, it never imports llama_cpp: a block is bytes with a type, a token count and a key.
"""

from .block_file import BlockCorruptError, BlockType, StoredBlock
from .identity import BLOCK_KINDS, TierConfig, block_key
from .space import Admission, BlockFile, KVSpace, Tier, TierUsage

__all__ = ["Admission", "BLOCK_KINDS", "BlockCorruptError", "BlockFile", "BlockType", "KVSpace", "StoredBlock", "Tier",
           "TierConfig", "TierUsage", "block_key"]
