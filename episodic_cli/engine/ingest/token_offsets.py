"""Character offsets of tokens: where each token of a document starts in its text (citations, event texts)."""
from __future__ import annotations

import numpy as np


def byte_to_char_offsets(text: str, data: bytes) -> np.ndarray:
    """char index for every byte offset 0..len(data) of the UTF-8 encoding of `text`."""
    raw = np.frombuffer(data, dtype=np.uint8)
    starts = (raw & 0xC0) != 0x80
    table = np.empty(len(raw) + 1, dtype=np.int64)
    table[:-1] = np.cumsum(starts) - 1
    table[-1] = len(text)
    # A byte in the middle of a character maps to that character; a boundary byte maps to its own start.
    return table


def token_char_offsets(doc_text: str, token_pieces: list[bytes]) -> np.ndarray:
    """offsets[i] = char offset where token i starts (offsets[n] = len(text)). Byte-level BPE pieces concatenate to
    the exact input; tokenizers that normalise text (SentencePiece's leading space) are mapped proportionally."""
    data = doc_text.encode("utf-8")
    lengths = np.fromiter((len(p) for p in token_pieces), dtype=np.int64, count=len(token_pieces))
    byte_offsets = np.concatenate([[0], np.cumsum(lengths)])
    if byte_offsets[-1] == len(data) and b"".join(token_pieces) == data:
        return byte_to_char_offsets(doc_text, data)[byte_offsets]
    return np.round(byte_offsets / max(byte_offsets[-1], 1) * len(doc_text)).astype(np.int64)
