"""Where an event of code may end, so that events follow definitions: the cost of each possible cut.

A cut is made at the start of a line. Every class, function and statement that spans that line start is broken by
it. Breaking one that fits in an event (at most max_tokens tokens, starting no earlier than the event) costs much: a
definition 100, a compound statement (if/for/with/try...) 30, a statement over several lines (a docstring, a long
call) 10; they add up. Breaking one that cannot be kept whole (longer than an event, or begun before the event)
costs 1 each, at most 9 in all: among cuts that break nothing that fits, the shallowest wins (between top-level
definitions before between methods, between methods before between the statements of a long function: "otherwise
cut at its inner blocks"). Comment lines directly above a statement belong to it, so a cut does not part a function
from the comment that introduces it.

Python is read with its own parser (`ast`); other languages with structure.py's definition lines, where a line that
continues the previous one (which ends on an operator, a comma or an opening bracket, or this one starts with a
closing bracket or a dot) counts as inside a statement. `segment.StreamingSegmenter` keeps only the cuts of least
cost in its allowed range and lets surprise and refinement choose among them (`cut_choices`).

The costs depend on the text and its token offsets only, so a resumed ingest computes the very same ones (the
checkpoint guarantee of document_pass.py). Token offsets are read only near the event being decided (they may be a
window of the document: sliding_array.py). Plain engine module: no terminal output, no llama.cpp.
"""
from __future__ import annotations

import ast
import re

import numpy as np

from ..documents.structure import line_offsets, regex_symbols

DEFINITION, COMPOUND, STATEMENT = 100, 30, 10   # cost of breaking one that fits in an event
BREAKS_FITTING = STATEMENT                        # a cost from this on breaks something that fits
MAX_DEPTH_COST = BREAKS_FITTING - 1               # what breaking blocks that cannot be kept whole may add up to
NO_CUT = 2**30                                    # not the start of a non-blank line: no event of code begins here
MIN_CODE_TOKENS = 16  # an event cut short to keep the next definition whole holds at least this many tokens

_COMMENT_RE = re.compile(r"[ \t]*(#|//|/\*|\*|--|;|%)")
_CONTINUES_RE = re.compile(r"(?:[,(\[{\\+\-*/=&|%<>^~]|\b(?:and|or|not|in|is))[ \t]*$")
_CONTINUATION_RE = re.compile(r"[ \t]*[)\]}.]")
_COMPOUND_NODES = tuple(getattr(ast, name) for name in ("If", "For", "AsyncFor", "While", "With", "AsyncWith", "Try",
                                                        "TryStar", "Match") if hasattr(ast, name))


class CodeCuts:
    """The blocks (statements and definitions, as line ranges) of one code file, and the cost of cutting at a token."""

    def __init__(self, text: str, python: bool):
        self.text = text
        self.lines = line_offsets(text)
        n_lines = len(self.lines)
        ends = np.append(self.lines[1:], len(text))
        stripped = [text[a:b].lstrip(" \t") for a, b in zip(self.lines, ends)]
        self.indent = np.asarray([(b - a) - len(s) for a, b, s in zip(self.lines, ends, stripped)], dtype=np.int64)
        self.blank = np.asarray([not s.strip() for s in stripped], dtype=bool)
        blocks = _python_blocks(text, self.lines) if python else None
        self.continuation = np.zeros(n_lines, dtype=np.int64)
        if blocks is None:  # another language, or Python that does not parse
            blocks = [(self._line_of(s.start), self._line_of(max(s.start, s.end - 1)), DEFINITION)
                      for s in regex_symbols(text)]
            self.continuation = _continuation_lines(stripped, self.blank)
        # Block i spans lines first[i]..last[i], its comments above included; a cut at the start of any line after
        # its first and up to its last breaks it.
        self.first = np.asarray([self._with_comments_above(f) for f, _, _ in blocks], dtype=np.int64)
        self.last = np.asarray([last for _, last, _ in blocks], dtype=np.int64)
        self.weight = np.asarray([w for _, _, w in blocks], dtype=np.int64)
        self.inside: list[list[int]] = [[] for _ in range(n_lines)]  # per line, the blocks its start breaks
        for i in np.flatnonzero(self.last > self.first):
            for line in range(self.first[i] + 1, self.last[i] + 1):
                self.inside[line].append(int(i))
        self._fits: dict[int, bool] = {}

    def _line_of(self, char: int) -> int:
        return int(np.searchsorted(self.lines, char, side="right")) - 1

    def _with_comments_above(self, line: int) -> int:
        """`line` moved up over the comment lines directly above it (no blank line between)."""
        while line > 0 and not self.blank[line - 1]:
            above = self.text[self.lines[line - 1]:self.lines[line]]
            if not _COMMENT_RE.match(above):
                break
            line -= 1
        return line

    def costs(self, offsets, clean, start: int, lo: int, hi: int, max_tokens: int) -> np.ndarray:
        """Cost of ending the event that begins at token `start` at each token lo..hi (the next event begins there).
        `offsets` (character where each token starts, offsets[n] = len(text)) and `clean` (segment.clean_cut_mask)
        may be numpy arrays or sliding windows of the document: they are read from `start` to hi + max_tokens."""
        n = len(offsets) - 1
        window = np.asarray(offsets[start:hi + 1], dtype=np.int64)
        at = window[lo - start:]
        marks = np.asarray(clean[lo:hi + 1], dtype=bool)
        out = np.full(hi - lo + 1, NO_CUT, dtype=np.int64)
        line = np.searchsorted(self.lines, at, side="right") - 1
        # A token that begins a non-blank line: the first after a newline, at most in the line's indentation.
        starts_line = marks & ~self.blank[line] & (at - self.lines[line] <= self.indent[line])
        event_line = self._line_of(int(window[0]))
        for j in np.flatnonzero(starts_line):
            fitting = depth = 0
            for i in self.inside[line[j]]:
                if self.first[i] >= event_line and self._block_fits(i, offsets, window, start, n, max_tokens):
                    fitting += self.weight[i]
                else:
                    depth += 1
            out[j] = fitting + min(depth, MAX_DEPTH_COST) + STATEMENT * self.continuation[line[j]]
        return out

    def _block_fits(self, i: int, offsets, window: np.ndarray, start: int, n: int, max_tokens: int) -> bool:
        """Block i holds at most max_tokens tokens: the token max_tokens after its first begins at or after its end.
        Asked only for blocks that begin inside the event being decided, so their first token is in `window`."""
        if i not in self._fits:
            a = int(self.lines[self.first[i]])
            b = int(self.lines[self.last[i] + 1]) if self.last[i] + 1 < len(self.lines) else len(self.text)
            first_token = start + int(np.searchsorted(window, a, side="left"))
            self._fits[i] = first_token + max_tokens >= n or int(offsets[first_token + max_tokens]) >= b
        return self._fits[i]


def cut_choices(costs: np.ndarray, lo: int, hi: int, early_from: int) -> int | np.ndarray | None:
    """What the segmenter may choose from, given the `costs` of tokens early_from..hi (lo..hi is its allowed range):
    a cut to take now (int), marks over lo..hi of the cuts of least cost to choose among (array), or None when no
    line starts in lo..hi (a very long line: the prose rules apply).

    When every cut in lo..hi breaks something that fits, the latest cut before lo that breaks nothing that fits is
    taken instead: an event shorter than min_tokens, so that the next one can hold the definition whole."""
    reach = costs[lo - early_from:]
    best = int(reach.min())
    if best >= NO_CUT:
        return None
    if best >= BREAKS_FITTING:
        early = costs[: lo - early_from]
        if len(early) and int(early.min()) < BREAKS_FITTING:
            return early_from + int(np.flatnonzero(early == early.min())[-1])
    return reach == best


def _python_blocks(text: str, lines: np.ndarray) -> list[tuple[int, int, int]] | None:
    """(first line, last line, weight) of every statement of a Python file (0-based lines, decorators included);
    None when Python cannot parse it."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        last = (getattr(node, "end_lineno", None) or node.lineno) - 1
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            weight = DEFINITION
        elif isinstance(node, _COMPOUND_NODES):
            weight = COMPOUND
        else:
            weight = STATEMENT
        out.append((max(first, 0), min(last, len(lines) - 1), weight))
    return out


def _continuation_lines(stripped: list[str], blank: np.ndarray) -> np.ndarray:
    """1 for a line that continues a statement (the previous non-blank line ends on an operator, a comma or an
    opening bracket, or this one starts with a closing bracket or a dot), else 0."""
    out = np.zeros(len(stripped), dtype=np.int64)
    previous = ""
    for i, line in enumerate(stripped):
        if blank[i]:
            continue
        line = line.rstrip("\n")
        if previous and (_CONTINUES_RE.search(previous) or _CONTINUATION_RE.match(line)):
            out[i] = 1
        previous = line
    return out
