"""A document's tokens, character offsets and clean-cut marks, tokenized chunk by chunk ahead of the ingest pass and
forgotten behind it, so that their memory does not grow with the document.

Tokenizing a long text in one call made llama.cpp's buffer 4 bytes per byte of text, and the whole-document arrays
derived from it (ids, pieces, byte and character offsets, marks) about 25 bytes per token more. Here the text is cut
into chunks of about CHUNK_CHARS characters at places where the tokenizer cannot join the two sides into one token,
so tokenizing the chunks one after the other gives the tokens of the whole text:

- byte-level BPE tokenizers (GPT-2 style: the bundled SmolLM2, Llama 3, Qwen) first split the text into pieces with
  a regular expression and merge only inside a piece. A single newline between two non-space characters is always a
  piece of its own, so a line that starts right after it is a safe cut ("foo\\nbar" -> "foo", "\\n", "bar"; two
  newlines or trailing spaces are not: the whitespace run would be split differently at the end of a chunk). A
  space before a letter, after a non-space character, starts a piece (" bar") and is the second choice.
- SentencePiece-style tokenizers that put a space before the text (`add_space_prefix`, Llama 2, the tests' tiny
  model) cut at a space before a word, and the chunk is tokenized without that space: the prefix the tokenizer adds
  stands for it.
- A chunk with no such place within MAX_CHUNK_CHARS (a megabyte without a space or a line break) is cut there
  anyway; the tokens next to that cut may differ from the whole text's. Tokenizers of any other kind (pieces that do
  not spell the text back) are tokenized in one chunk, as before: their memory still grows with the document.

tests/test_token_stream.py checks chunked against whole-text tokenization on real texts with both model kinds.

Knowing the document's length up front (the segmenter's last decisions, the progress bar and the checkpoint need
it) costs one counting pass over the chunks before the llama.cpp pass: a second tokenization, a few seconds per
10 MB of text against hours of decoding.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..documents.text import Text
from ..heap import release_free_memory
from .segment import clean_cut_mask
from .sliding_array import SlidingArray
from .token_offsets import token_char_offsets

CHUNK_CHARS = 1 << 16        # text per tokenizer call (llama.cpp's buffer: 4 bytes per byte of it)
MAX_CHUNK_CHARS = 1 << 20    # a chunk is cut here even without a safe place

LINE_START = re.compile(r"(?<=\S\n)(?=\S)")   # a single newline between two non-space characters
WORD_START = re.compile(r"(?<=\S) (?=[^\W\d_])")  # the space before a letter, after a non-space character


@dataclass(frozen=True)
class Chunk:
    char_start: int
    char_end: int
    token_start: int


def tokenizer_kind(model) -> str:
    """'exact' (pieces spell the text back), 'space_prefix' (they spell it with a space in front) or 'other'."""
    pieces = model.pieces()
    spelled = b"".join(pieces[t] for t in model.tokenize("a.b\nc d"))
    if spelled == b"a.b\nc d":
        return "exact"
    if spelled == b" a.b\nc d":
        return "space_prefix"
    return "other"


def next_cut(text: Text, start: int, kind: str, target: int = CHUNK_CHARS, limit: int = MAX_CHUNK_CHARS) -> int:
    """Where the chunk starting at `start` ends: the first line start (or, failing that, word start) at least
    `target` characters on, looked for within 2 x `target` first, then up to `limit`; the text's end if nearer.
    Only that stretch of the text is read (with the two characters before it, which the patterns look back at)."""
    if kind == "other" or len(text) - start <= target:
        return len(text)
    patterns = (LINE_START, WORD_START) if kind == "exact" else (WORD_START,)
    lo = start + target
    back = min(2, lo)
    for reach in (2 * target, limit):
        stretch = text[lo - back : min(start + reach, len(text))]
        for pattern in patterns:
            found = pattern.search(stretch, back)
            if found:
                return lo - back + found.start()
    return min(start + limit, len(text))


def chunk_char_offsets(text: str, pieces: list[bytes]) -> np.ndarray:
    """Character offset in `text` where each token starts. A space the tokenizer put in front (SentencePiece's
    prefix, at the start of a document) belongs to the first token, which starts at 0."""
    if pieces and pieces[0][:1] == b" " and b"".join(pieces) == b" " + text.encode("utf-8"):
        return np.maximum(token_char_offsets(" " + text, pieces)[:-1] - 1, 0)
    return token_char_offsets(text, pieces)[:-1]


class DocumentTokens:
    """`tokens`, `offsets` (character where each token starts; offsets[n] = len(text)) and `clean` (an event may
    start at token p: segment.clean_cut_mask) of one document, as SlidingArrays of the whole document's length that
    tokenize ahead on demand. The caller releases what it no longer needs (`release_before`)."""

    def __init__(self, model, text: Text, chunk_chars: int = CHUNK_CHARS,
                 on_count: Callable[[int, int], None] | None = None):
        """`on_count(characters counted, characters in all)` follows the counting pass (seconds on a large file)."""
        self.model, self.text = model, text
        self.pieces = model.pieces()
        self.kind = tokenizer_kind(model)
        self.chunks: list[Chunk] = []
        n, start = 0, 0
        while start < len(text):  # the counting pass
            end = next_cut(text, start, self.kind, chunk_chars)
            self.chunks.append(Chunk(start, end, n))
            n += len(self._tokenize(self.chunks[-1]))
            start = end
            if len(self.chunks) % 16 == 0:
                release_free_memory()  # each chunk's token buffers would otherwise pile up as free heap (heap.py)
            if on_count is not None:
                on_count(start, len(text))
        self.n = n
        self.tokens = SlidingArray(n, np.int32, self._fill_to)
        self.offsets = SlidingArray(n + 1, np.int64, self._fill_to)
        self.clean = SlidingArray(n + 1, bool, self._fill_to)
        self._next_chunk = 0
        self._filled = 0          # tokens before this are written
        self._last_piece = b""    # the piece of token _filled - 1 (clean marks read the token before)

    def __len__(self) -> int:
        return self.n

    def start_at(self, position: int) -> None:
        """Skip to `position` (a resumed ingest): nothing before it will be read."""
        self.release_before(position)
        if position <= self._filled:
            return
        # From the chunk holding the token before `position`: its mark reads that token's piece.
        index = max(bisect_right([c.token_start for c in self.chunks], max(position - 1, 0)) - 1, 0)
        self._next_chunk, self._filled, self._last_piece = index, self.chunks[index].token_start, b""

    def release_before(self, position: int) -> None:
        for array in (self.tokens, self.offsets, self.clean):
            array.release_before(position)

    @property
    def nbytes(self) -> int:
        return self.tokens.nbytes + self.offsets.nbytes + self.clean.nbytes

    def _tokenize(self, chunk: Chunk) -> np.ndarray:
        skip_space = self.kind == "space_prefix" and chunk.char_start > 0 and self.text[chunk.char_start] == " "
        return self.model.tokenize(self.text[chunk.char_start + skip_space : chunk.char_end])

    def _fill_to(self, stop: int) -> None:
        while self._filled < min(stop, self.n) or (stop > self.n and self._next_chunk < len(self.chunks)):
            self._write_chunk(self.chunks[self._next_chunk])
            self._next_chunk += 1

    def _write_chunk(self, chunk: Chunk) -> None:
        ids = self._tokenize(chunk)
        pieces = [self.pieces[t] for t in ids]
        first, end = chunk.token_start, chunk.token_start + len(ids)
        offsets = chunk_char_offsets(self.text[chunk.char_start : chunk.char_end], pieces) + chunk.char_start
        clean = clean_cut_mask([self._last_piece] + pieces)[1:-1]
        if first == 0:
            clean[0] = True  # a document start is always a boundary
        last = chunk is self.chunks[-1]
        keep = max(self.tokens.live_from - first, 0)  # a resumed pass skips the start of its first chunk
        if keep < len(ids):
            self.tokens[first + keep : end] = ids[keep:]
            self.offsets[first + keep : end] = offsets[keep:]
            self.clean[first + keep : end] = clean[keep:]
        if last:
            self.offsets[end] = len(self.text)
            self.clean[end] = True
        self._filled, self._last_piece = end, (pieces[-1] if pieces else self._last_piece)
