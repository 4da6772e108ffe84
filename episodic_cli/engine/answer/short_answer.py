"""A short answer first: the span of the evidence that the model itself finds likeliest as the start of its answer.

Given the two sentences that hold the answer, the bundled 135M model still often restates the question or names a
nearby wrong thing instead of copying the fact (docs/heldout.md). Ranking the answer-shaped spans of those sentences
(identifiers, numbers, quoted words, names, options, paths, MIME types) by the model's own likelihood as the answer's
first words picks the right fact more often than free decoding writes it on some documents and less often on others
(docs/evaluation.md, 2026-11-23).
So for a question that asks for a fact (which / what / who / where / when / how many), the answer starts with that
span, decoded into the cache as if the model had written it, and the model goes on from there for one sentence.

This is "exact-extract" decoding (research notes C): every span is scored in one batch, each in its own sequence
sharing the evidence already in the cache (a copied sequence is metadata only), so the context is not read again.
Plain engine module: no terminal output.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...store.lexical import STOP_WORDS
from ..llama.backend import INGEST_BATCH, LlamaSession

MAX_SPANS = 16        # spans scored per answer: the batch (and the sequences) it needs
MAX_SPAN_TOKENS = 24  # a longer "span" is a code expression or a sentence, not a fact to lead with
SPAN_SEQUENCES = MAX_SPANS + 1  # sequence 0 holds the prompt; each scored span gets one of its own

# A question that asks for a fact starts with (or has a clause starting with) one of these words, perhaps after a
# preposition ("Of which type ...", "In what year ...") or, in a chat follow-up, a conjunction ("and who ...").
_FACT_RE = re.compile(r"(?:^|[,:;]\s*)(?:(?:and|but|so|then|also)\s+)?"
                      r"(?:(?:in|of|on|at|for|from|to|by|with|under|into|after|before)\s+)?"
                      r"(?:which|what|who|whom|whose|where|when|how\s+(?:many|much|long|old|often))\b", re.I)
_QUOTED_RE = re.compile(r"``([^`\n]{1,60})``|`([^`\n]{1,60})`|\"([^\"\n]{1,60})\"|\u201c([^\u201d\n]{1,60})\u201d"
                        r"|'([^'\n]{1,40})'")
# Words with inner punctuation count whole: libtasn1.h, audio/x-midi, fnmatch(3), --no-time-strict, 0x100, X.680.
_TOKEN_RE = re.compile(r"(?<![\w-])(?:--?)?[A-Za-z0-9_][\w.\-/:+()<>]*[\w)>]|(?<![\w-])[0-9]")
# Two to five capitalised words on one line: a name (Hiroshi Iwatani, San Francisco, XDG Base Directory Specification).
_NAME_RE = re.compile(r"\b[A-Z][a-z]+(?:[ \t]+[A-Z]\w*){1,4}")


@dataclass
class Lead:
    """The span an answer starts with, and its tokens (decoded into the cache after it is shown)."""

    text: str
    tokens: np.ndarray


def asks_for_a_fact(question: str) -> bool:
    return bool(_FACT_RE.search(question.strip()))


def _answer_shaped(word: str) -> bool:
    return bool(any(c.isdigit() for c in word) or "_" in word or re.search(r"[a-z][A-Z]", word)
                or (word.isupper() and len(word) > 1) or word.startswith("-") or re.search(r"\w[./]\w", word)
                or "(" in word)


def _key(text: str) -> str:
    return " ".join(re.sub(r"[^\w]+", " ", text.lower()).split())


def answer_spans(quotes: list[str], question: str) -> list[str]:
    """The answer-shaped spans of the evidence, in reading order, without those the question already holds."""
    text = "\n".join(quotes)
    found: list[str] = []
    for m in _QUOTED_RE.finditer(text):
        found.append(next(g for g in m.groups() if g).strip())
    for m in _TOKEN_RE.finditer(text):
        word = m.group(0).rstrip(".:")
        if "(" in word and ")" not in word:  # a call cut by the sentence: its name
            word = word.split("(")[0]
        if word.lower().startswith(("http://", "https://")):  # a link is a source, not an answer
            continue
        if _answer_shaped(word):
            found.append(word)
    for m in _NAME_RE.finditer(text):
        words = m.group(0).split()
        while words and words[0].lower() in STOP_WORDS:  # "The CTRL", "For Japanese": a sentence's first word
            words = words[1:]
        if len(words) >= 2 or (words and _answer_shaped(words[0])):
            found.append(" ".join(words))
    asked = f" {_key(question)} "
    seen: set[str] = set()
    spans = []
    for span in found:
        key = _key(span)
        if not key or key in seen or f" {key} " in asked:
            continue
        seen.add(key)
        spans.append(span)
    return spans


def likeliest(session: LlamaSession, pos: int, spans: list[str]) -> Lead | None:
    """The span the model finds likeliest (log-probability over the square root of its length) as the continuation
    of sequence 0 at `pos` (the prompt's end). Overwrites the session's last logits (decode the lead next)."""
    room = min(MAX_SPANS, session.n_seq_max - 1)  # sequence 0 holds the prompt
    candidates: list[tuple[str, np.ndarray]] = []
    total = 0
    for span in spans:
        if len(candidates) >= room:
            break
        tokens = session.model.tokenize(span)
        if not 0 < len(tokens) <= MAX_SPAN_TOKENS or total + len(tokens) > INGEST_BATCH:
            continue
        candidates.append((span, tokens))
        total += len(tokens)
    if not candidates:
        return None
    surprise = session.branch_surprise(pos, [t for _, t in candidates])
    # Log-probability summed over the span's tokens, divided by the square root of their number: the plain sum
    # favours one-token spans, the mean favours long ones, whose later tokens are predictable once the first is
    # chosen (a quoted sentence beat "PluginValidationError"). On the first four held-out sets the right span came
    # first for 19 of 44 questions this way, 17 by the mean, 12 by the sum (docs/evaluation.md).
    scores = [-float(s.sum()) / float(np.sqrt(len(s))) for s in surprise]
    best = int(np.argmax(scores))
    return Lead(candidates[best][0], candidates[best][1])
