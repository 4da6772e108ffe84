"""Each event's checksum: its text and its anchors (document, ordinal, token/char/page/line spans, section) hashed
together, written with the row and checked whenever the row is read.

A damaged database page can change an event's text and still pass SQLite's own checks (`PRAGMA integrity_check`
looks at the b-tree's structure, not at what the cells hold): quotes and answers would then use the altered text.
"""

from __future__ import annotations

import hashlib
import json

# The columns a checksum covers, in this order (events table, docs/store-format.md "Event checksums").
CHECKED_COLUMNS = ("document_id", "ordinal", "token_start", "token_end", "char_start", "char_end", "page_start",
                   "page_end", "line_start", "line_end", "section", "text")


def event_checksum(values: tuple) -> int:
    """The checksum of an event row's CHECKED_COLUMNS values: 64 bits of BLAKE2b as a signed SQLite INTEGER."""
    data = json.dumps(list(values), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big", signed=True)
