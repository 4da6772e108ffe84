"""A document's text, addressed by character offsets: held as a str when short, spooled to disk when long.

Ingest reads a document's text a slice at a time (a chunk to tokenize, an event's text, the lines around a heading),
so it need not hold all of it. Most files are short and their text stays a str. A text longer than IN_MEMORY_CHARS
is written, while it is decoded, to an unnamed temporary file as UTF-32 (4 bytes a character, so character i sits at
byte 4 * i) and read back by slices: memory then holds the slices being read, whatever the document's length. Held
whole, a 10M-token log (~40M characters) takes 40-160 MB as a str and several times that while it is decoded and its
newlines normalised; the disk file takes 4 bytes a character, next to KV blocks of ~9 KB a token.

Engine code treats both forms alike through len(text), text[i], text[a:b] and iter_lines(text). Other str methods
(find, split, a regex over the whole) are for texts known to be short: `isinstance(text, str)`.
"""
from __future__ import annotations

import operator
import tempfile
from collections.abc import Iterator
from pathlib import Path

IN_MEMORY_CHARS = 1 << 21   # longer texts are spooled (2M characters: 2-8 MB as a str)
READ_CHARS = 1 << 20        # what iter_lines and count_newlines read at a time from a spooled text
_WIDTH = 4                  # bytes a character in the spool file (UTF-32)


class SpooledText:
    """A read-only text in a temporary file, UTF-32-LE; the file disappears when closed or when the process ends."""

    def __init__(self, file, n_chars: int):
        self._file, self._n = file, n_chars

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, key) -> str:
        if isinstance(key, slice):
            start, stop, step = key.indices(self._n)
            if step != 1:
                raise ValueError("a spooled text is read by contiguous slices")
            if stop <= start:
                return ""
            self._file.seek(_WIDTH * start)
            return self._file.read(_WIDTH * (stop - start)).decode("utf-32-le")
        i = operator.index(key)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("text index out of range")
        return self[i : i + 1]

    def __repr__(self) -> str:
        return f"SpooledText({self._n:,} characters)"

    def close(self) -> None:
        self._file.close()


Text = str | SpooledText


class TextSpool:
    """Collects a text written piece by piece; past `limit` characters it moves to a temporary file in `directory`
    (the system's temporary folder when None). `finish()` gives the text; `discard()` drops what was written."""

    def __init__(self, directory: Path | str | None = None, limit: int | None = None):
        self.directory = directory
        self.limit = IN_MEMORY_CHARS if limit is None else limit
        self.n_chars = 0
        self.utf8_bytes = 0
        self._parts: list[str] = []
        self._file = None

    def write(self, piece: str) -> None:
        if not piece:
            return
        self.n_chars += len(piece)
        self.utf8_bytes += len(piece.encode("utf-8", "surrogatepass"))
        if self._file is None:
            self._parts.append(piece)
            if self.n_chars <= self.limit:
                return
            self._file = tempfile.TemporaryFile(dir=self.directory, prefix="epi-text-")
            pieces, self._parts = self._parts, []
            for held in pieces:
                self._file.write(held.encode("utf-32-le", "surrogatepass"))
            return
        self._file.write(piece.encode("utf-32-le", "surrogatepass"))

    def finish(self) -> Text:
        if self._file is None:
            text, self._parts = "".join(self._parts), []
            return text
        self._file.flush()
        return SpooledText(self._file, self.n_chars)

    def discard(self) -> None:
        self._parts = []
        if self._file is not None:
            self._file.close()
            self._file = None


def iter_lines(text: Text, block: int | None = None) -> Iterator[tuple[int, str]]:
    """(offset, line) for each line of `text`, without its newline, exactly as text.split("\\n") gives them (a text
    ending on a newline ends with an empty line); a spooled text is read `block` (READ_CHARS) characters at a time."""
    block = block or READ_CHARS
    if isinstance(text, str):
        pos = 0
        while True:
            end = text.find("\n", pos)
            if end < 0:
                yield pos, text[pos:]
                return
            yield pos, text[pos:end]
            pos = end + 1
    carry, carry_at, read = "", 0, 0
    while read < len(text):
        piece = carry + text[read : read + block]
        read = min(read + block, len(text))
        lines = piece.split("\n")
        for line in lines[:-1]:
            yield carry_at, line
            carry_at += len(line) + 1
        carry = lines[-1]
    yield carry_at, carry


def count_newlines(text: Text, start: int, stop: int) -> int:
    """Newlines in text[start:stop], read a block at a time."""
    n = 0
    while start < stop:
        end = min(stop, start + READ_CHARS)
        n += text[start:end].count("\n")
        start = end
    return n


def close_text(text: Text) -> None:
    if isinstance(text, SpooledText):
        text.close()
