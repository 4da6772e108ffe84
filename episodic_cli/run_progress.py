"""Where a whole `epi ingest` run stands, for a progress display a person can trust over hours: files and tokens
done, the run's total tokens (known for the files read so far, estimated for the rest), tokens/s and the time left.

A file's token count is known only once it is opened (tokenizing is part of reading it), so the files not reached
yet are estimated from their size at the tokens per byte seen so far, separately for PDFs (whose bytes are mostly
not text) and other files; before any file of a kind was read, at DEFAULT_TOKENS_PER_BYTE. Unchanged and skipped
files turn out to cost nothing and leave the estimate when they are reached. The rate is the tokens this run read
(not those a resumed file had committed before) over the seconds since it read its first batch, so the model load
and a slow start weigh less and less; the time left is the tokens left at that rate.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

# Until a file of the kind is read: text as the standard library's code measured (1,153,323 tokens in 4.0 MB with the
# bundled tokenizer); for PDFs a rough guess (their bytes are mostly fonts, images and layout).
DEFAULT_TOKENS_PER_BYTE = {"pdf": 0.05, "text": 0.29}


def size_kind(path: str) -> str:
    return "pdf" if path.lower().endswith(".pdf") else "text"


@dataclass
class _File:
    size: int
    kind: str
    tokens: int | None = None   # known once the file is opened
    done: int = 0               # tokens read or resumed
    finished: bool = False


class RunProgress:
    def __init__(self, sizes: dict[str, int], clock: Callable[[], float] = time.monotonic):
        """`sizes`: display path -> bytes, for every file the run will take up, in any order."""
        self.files = {path: _File(size, size_kind(path)) for path, size in sizes.items()}
        self.clock = clock
        self.files_done = 0
        self.read_this_run = 0        # tokens decoded by this run (the rate's numerator)
        self._first_read: float | None = None
        self._current: str | None = None

    # -- events from the pipeline -----------------------------------------------------------------------------------

    def document_started(self, path: str, n_tokens: int, resumed_at: int = 0) -> None:
        f = self.files.setdefault(path, _File(0, size_kind(path)))
        f.tokens, f.done = n_tokens, resumed_at
        self._current = path

    def tokens_done(self, n: int) -> None:
        if self._first_read is None:
            self._first_read = self.clock()
        else:
            self.read_this_run += n  # the first batch's tokens start the clock; they do not count against it
        if self._current is not None:
            self.files[self._current].done += n

    def document_finished(self, path: str, n_tokens: int) -> None:
        """`n_tokens`: what the file turned out to hold for this run (0 when unchanged, skipped or failed)."""
        f = self.files.setdefault(path, _File(0, size_kind(path)))
        f.tokens, f.done, f.finished = n_tokens, n_tokens, True
        self.files_done += 1
        self._current = None

    # -- the run's standing -------------------------------------------------------------------------------------------

    @property
    def current(self) -> tuple[int, int] | None:
        """(tokens read or resumed, tokens) of the file being read, or None between files."""
        if self._current is None:
            return None
        f = self.files[self._current]
        return f.done, f.tokens or 0

    @property
    def files_total(self) -> int:
        return len(self.files)

    @property
    def tokens_completed(self) -> int:
        """Tokens read or resumed so far, over the whole run."""
        return sum(f.done for f in self.files.values())

    def tokens_per_byte(self, kind: str) -> float:
        known = [f for f in self.files.values() if f.kind == kind and f.tokens and f.size]
        size = sum(f.size for f in known)
        return sum(f.tokens for f in known) / size if size else DEFAULT_TOKENS_PER_BYTE[kind]

    @property
    def tokens_total(self) -> int:
        """Known counts of the files reached, estimates for the others."""
        ratio = {kind: self.tokens_per_byte(kind) for kind in DEFAULT_TOKENS_PER_BYTE}
        return sum(f.tokens if f.tokens is not None else round(f.size * ratio[f.kind]) for f in self.files.values())

    @property
    def estimated(self) -> bool:
        """Whether the total still holds estimates (files not reached yet)."""
        return any(f.tokens is None for f in self.files.values())

    @property
    def tokens_per_s(self) -> float | None:
        if self._first_read is None or self.read_this_run == 0:
            return None
        return self.read_this_run / max(self.clock() - self._first_read, 1e-6)

    @property
    def seconds_left(self) -> float | None:
        rate = self.tokens_per_s
        if not rate:
            return None
        return max(self.tokens_total - self.tokens_completed, 0) / rate
