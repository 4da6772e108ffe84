"""Evidence inside the retrieved events: the few sentences that matter for a question, and the quotes that support
an answer.

A retrieved event is 160-450 tokens; the sentence that holds the answer is one of ~10-30 in the 1.5-3k retrieved
tokens. The bundled 135M model copies an answer well when it is given that sentence and little else, and badly when
the sentence is buried among the rest (docs/evaluation.md). So epi narrows the evidence before answering (`focus`),
and after answering finds the sentences that support the answer's own words (`support`).

Scoring is lexical and local to the retrieved text: a question word weighs by how rare it is among the retrieved
sentences (inverse sentence frequency), identifiers also count in their split forms (`user_config_path` -> user,
config, path; `getAndroidApiLevel` -> get, android, api, level), and a sentence that keeps two question words side
by side scores a little more. Dense similarity of sentences was measured to localise worse (notes, E).

Every span is a pair of character offsets into the stored event text, so a quote is `event.text[start:end]`
exactly, and its page or lines are counted from the event's own text (`locate`).
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from ...store.lexical import STOP_WORDS
from ..documents.blocks import BLOCK_KINDS
from .retrieve import RetrievedEvent


_WORD_RE = re.compile(r"[A-Za-z0-9_]+(?:[.\-/][A-Za-z0-9_]+)*")
_CAMEL_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# A sentence may end after . ! ? (and closing quotes/brackets) followed by whitespace, and always at a blank line.
_SENTENCE_END_RE = re.compile(r"""[.!?]["')\]]*(?=\s)|\n[ \t]*\n""")
# A full stop that does not end a sentence: after these abbreviations, or after one capital letter (an initial).
ABBREVIATIONS = frozenset("""
mr mrs ms dr prof st sr jr vs etc e.g i.e cf al fig figs vol vols ch chap sec ed eds pp p approx ca inc ltd
co corp dept est jan feb mar apr jun jul aug sep sept oct nov dec ref refs eq eqs op viz resp
""".split())
# Abbreviations that are also everyday words ("no", "nos"): only before a number ("No. 5", "nos. 3-4"); `He said
# "no." Then ...` is two sentences.
NUMBER_ABBREVIATIONS = frozenset({"no", "nos"})
_WORD_BEFORE_RE = re.compile(r"([A-Za-z][A-Za-z.]*)\.$")
# Units without a sentence end (code, tables, lists) are cut at line ends past this length; a sentence that does end
# with a full stop stays whole up to PROSE_SENTENCE_CHARS (a long wrapped sentence must reach the model whole).
MAX_SENTENCE_CHARS = 320
PROSE_SENTENCE_CHARS = 1200
# A word hyphenated across a line end (PDF text): "iden-\ntifier" reads as "identifier".
_HYPHEN_BREAK_RE = re.compile(r"(?<=[a-z])-[ \t]*\n[ \t]*(?=[a-z])")


def readable(text: str) -> str:
    """`text` as a reader (or the model) should see it: line-end hyphenation joined. Offsets stay those of the
    original text; only the words read change."""
    return _HYPHEN_BREAK_RE.sub("", text)


@dataclass(frozen=True)
class Span:
    """A sentence-like unit of one event's text: `text == readable(event_text[start:end])`, trimmed of edge
    whitespace; `start`/`end` are offsets into the event's text as stored."""

    start: int
    end: int
    text: str


def words(text: str) -> list[str]:
    """Lower-case terms of `text`: each word as written (`asn1_der_decoding2`, `x.680`, `--no-time-strict` ->
    no-time-strict) plus its parts split at `_ . - /` and at camel-case humps."""
    out: list[str] = []
    for m in _WORD_RE.finditer(text):
        w = m.group(0)
        out.append(w.lower())
        parts = [p for chunk in re.split(r"[_.\-/]", w) for p in _CAMEL_RE.findall(chunk)]
        if len(parts) > 1:
            out.extend(p.lower() for p in parts)
    return out


@lru_cache(maxsize=1)
def _english_stemmer():
    import snowballstemmer  # ~0.1 s to import (all 36 languages): only when a question is first scored

    return snowballstemmer.stemmer("english")  # PyStemmer's C version where that is installed


@lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """The English Snowball (Porter2) stem of a lower-case word, so that "class"/"classes", "use"/"used"/"uses" and
    "defines"/"defined" meet; a word with digits, underscores or dots (an identifier, a version) keeps its form. The
    cache keeps the pure-Python stemmer off the answer's path (a question and its sentences repeat their words)."""
    if not word.isalpha():
        return word
    return _english_stemmer().stemWord(word)


def content_words(text: str) -> set[str]:
    return {stem(w) for w in words(text) if w not in STOP_WORDS and (len(w) > 1 or w.isdigit())}


def _trimmed(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


def _cut_long(text: str, a: int, b: int) -> list[tuple[int, int]]:
    """Split [a, b) at line ends into pieces of at most MAX_SENTENCE_CHARS (a single longer line stays whole)."""
    if b - a <= MAX_SENTENCE_CHARS:
        return [(a, b)]
    pieces, start = [], a
    while start < b:
        if b - start <= MAX_SENTENCE_CHARS:
            pieces.append((start, b))
            break
        cut = text.rfind("\n", start, start + MAX_SENTENCE_CHARS)
        if cut <= start:
            cut = text.find("\n", start + MAX_SENTENCE_CHARS)
            if cut == -1 or cut >= b:
                pieces.append((start, b))
                break
        pieces.append((start, cut))
        start = cut + 1
    return pieces


def _ends_sentence(text: str, m: re.Match) -> bool:
    """Whether a match of _SENTENCE_END_RE really ends a sentence: not after an abbreviation or an initial, and not
    before a word on the same line that goes on in lower case ("5-7 min. on 2 cores", "the v. 0.3.36 build")."""
    if text[m.start()] != ".":
        return True
    before = _WORD_BEFORE_RE.search(text, max(0, m.start() - 12), m.start() + 1)
    word = before.group(1) if before else ""
    if word.lower() in ABBREVIATIONS or (len(word) == 1 and word.isupper()):
        return False
    gap = text[m.end(): m.end() + 40]
    rest = gap.lstrip(" \t")  # on the same line only: a line that starts in lower case may be a list or code
    if word.lower() in NUMBER_ABBREVIATIONS and m.group(0) == "." and rest[:1].isdigit():
        return False  # "No. 5"; a closing quote ('"no."') ends the sentence whatever follows
    return not (rest[:1].islower() and len(rest) < len(gap))


def split_sentences(text: str) -> list[Span]:
    """Sentence-like units of `text` with their offsets, in order, none empty. Prose splits at sentence ends and blank
    lines (version numbers, decimals, paths and abbreviations keep their full stops); code and other text without
    full stops splits at line ends once a unit grows past MAX_SENTENCE_CHARS."""
    spans: list[Span] = []
    start = 0
    bounds = [(m.end(), m.group(0)[0] != "\n") for m in _SENTENCE_END_RE.finditer(text) if _ends_sentence(text, m)]
    for end, full_stop in bounds + [(len(text), False)]:
        if end <= start:
            continue
        whole = full_stop and end - start <= PROSE_SENTENCE_CHARS
        for a, b in [(start, end)] if whole else _cut_long(text, start, end):
            a, b = _trimmed(text, a, b)
            if b > a:
                spans.append(Span(a, b, readable(text[a:b])))
        start = end
    return spans


@dataclass
class Scored:
    """A sentence of retrieved event `index` (into the retrieved list), with its score."""

    index: int
    span: Span
    score: float


ANSWER_LIKE_BONUS = 2.0
_QUOTED_RE = re.compile(r"""['"`<]([^'"`<>\s]{1,40})['"`>]""")


def candidates(text: str) -> set[str]:
    """Words of `text` shaped like the answer to a "which/what" question: quoted words, identifiers (with _ - . or
    digits or inner capitals), command-line options, numbers."""
    out = {stem(m.group(1).lower()) for m in _QUOTED_RE.finditer(text)}
    for m in _WORD_RE.finditer(text):
        w = m.group(0)
        if any(c.isdigit() for c in w) or "_" in w or re.search(r"[a-z][A-Z]", w) or w.isupper() and len(w) > 1:
            out.add(stem(w.lower()))
    for m in re.finditer(r"(?<!\S)--?[A-Za-z][\w-]*", text):
        out.add(m.group(0).lstrip("-").lower())
    return out


def _idf(units: list[set[str]]) -> dict[str, float]:
    n = len(units)
    df = Counter(w for u in units for w in u)
    return {w: math.log((n + 1) / (c + 0.5)) for w, c in df.items()}


def _bigrams(text: str) -> set[tuple[str, str]]:
    ws = [w for w in words(text) if w not in STOP_WORDS]
    return set(zip(ws, ws[1:]))


def score_sentences(question: str, retrieved: list[RetrievedEvent]) -> list[Scored]:
    """Every sentence of every retrieved event, scored against the question (see the module's docstring)."""
    return score_texts(question, [r.event.text for r in retrieved])


def score_texts(question: str, texts: list[str]) -> list[Scored]:
    """Every sentence of every text, scored against the question; `Scored.index` is the text's place in `texts`."""
    units = [(i, s) for i, text in enumerate(texts) for s in split_sentences(text)]
    if not units:
        return []
    terms = [content_words(s.text) for _, s in units]
    idf = _idf(terms)
    q = content_words(question)
    qbi = _bigrams(question)
    out = []
    for (i, s), t in zip(units, terms):
        shared = q & t
        score = sum(idf[w] for w in shared)
        if shared and qbi:
            score += 0.5 * len(qbi & _bigrams(s.text))
        if shared and ANSWER_LIKE_BONUS and (candidates(s.text) - q):
            score += ANSWER_LIKE_BONUS
        # a long unit shares more words by chance: damp, gently, by its size in words
        score /= 1.0 + 0.15 * math.log1p(max(len(t), 1) / 12)
        out.append(Scored(i, s, score))
    return out


def focus(question: str, retrieved: list[RetrievedEvent], n: int = 2) -> list[Scored]:
    """The `n` sentences that best match the question, in the order the retrieved events are laid out (and reading
    order inside an event); empty when no sentence shares a word with the question."""
    scored = [s for s in score_sentences(question, retrieved) if s.score > 0]
    best = sorted(scored, key=lambda s: -s.score)[:n]
    return sorted(best, key=lambda s: (s.index, s.span.start))


FOCUS_SENTENCES = 2  # chosen on the held-out sets (docs/evaluation.md)


def narrow(question: str, retrieved: list[RetrievedEvent], n: int = FOCUS_SENTENCES
           ) -> list[tuple[int, list[tuple[int, int]]]]:
    """The evidence an answer reads: [(index into `retrieved`, [(start, end) of its chosen sentences])], in the
    retrieved order; empty when no sentence shares a word with the question (then the answer reads everything)."""
    groups: dict[int, list[tuple[int, int]]] = {}
    for s in focus(question, retrieved, n):
        groups.setdefault(s.index, []).append((s.span.start, s.span.end))
    return sorted(groups.items())


# -- support of an answer -----------------------------------------------------------------------------------------

SUPPORT_THRESHOLD = 0.5  # share of the answer's own words (weighted) that the quotes must hold


@dataclass
class Evidence:
    """A quote that supports an answer: `quote == readable(retrieved[index].event.text[start:end])`."""

    index: int
    start: int
    end: int
    quote: str
    page: int | None
    page_end: int | None
    line_start: int | None
    line_end: int | None
    highlight: list[tuple[int, int]]  # offsets inside `quote` of the words shared with the answer (and question)


@dataclass
class Support:
    evidence: list[Evidence]
    supported: bool
    coverage: float  # weighted share of the answer's own words found in the quotes (1.0 when it has none)


def answer_terms(answer: str, question: str) -> set[str]:
    """The answer's own content words: those it adds to the question (what a reader must find in the sources)."""
    return content_words(answer) - content_words(question)


def support(question: str, answer: str, retrieved: list[RetrievedEvent], max_quotes: int = 2) -> Support:
    """The sentences (at most `max_quotes`) that hold most of the answer's own words, chosen greedily by the weight
    of the words they add; `supported` when they hold at least SUPPORT_THRESHOLD of that weight. An answer that adds
    no word to the question (e.g. it repeats it) is quoted by the question's best sentences and not counted as
    supported."""
    units = [(i, s) for i, r in enumerate(retrieved) for s in split_sentences(r.event.text)]
    if not units or not answer.strip():
        return Support([], False, 0.0)
    terms = [content_words(s.text) for _, s in units]
    idf = _idf(terms)
    default = math.log(len(units) + 1) + 1.0  # a word no sentence has weighs as the rarest
    a_terms = answer_terms(answer, question)
    q_terms = content_words(question)
    total = sum(idf.get(w, default) for w in a_terms)
    chosen: list[int] = []
    covered: set[str] = set()
    if total > 0:
        for _ in range(max_quotes):
            gains = [(sum(idf[w] for w in (t & a_terms) - covered)
                      + 0.1 * sum(idf[w] for w in t & q_terms), -k) for k, t in enumerate(terms) if k not in chosen]
            best = max(gains, default=None)
            if best is None or best[0] <= 0 or not (terms[-best[1]] & a_terms) - covered:
                break
            chosen.append(-best[1])
            covered |= terms[-best[1]] & a_terms
    coverage = sum(idf.get(w, default) for w in covered) / total if total > 0 else 0.0
    supported = total > 0 and coverage >= SUPPORT_THRESHOLD
    if not chosen:  # nothing holds the answer's words: show where the question points instead
        chosen = [max(range(len(units)), key=lambda k: (sum(idf[w] for w in terms[k] & q_terms), -k))]
        if not terms[chosen[0]] & q_terms:
            chosen = []
    marks = a_terms | q_terms
    evidence = []
    for k in sorted(chosen, key=lambda k: (units[k][0], units[k][1].start)):
        i, s = units[k]
        evidence.append(Evidence(i, s.start, s.end, s.text, *locate(retrieved[i], s.start, s.end),
                                 highlight=highlights(s.text, marks)))
    return Support(evidence, supported, round(coverage, 3))


def highlights(text: str, marks: set[str]) -> list[tuple[int, int]]:
    """Offsets of the words of `text` whose own form or one of whose parts is in `marks`."""
    out = []
    for m in _WORD_RE.finditer(text):
        if {stem(w) for w in words(m.group(0))} & marks - STOP_WORDS:
            out.append((m.start(), m.end()))
    return out


# -- where a quote is -----------------------------------------------------------------------------------------------

def locate(r: RetrievedEvent, start: int, end: int) -> tuple[int | None, int | None, int | None, int | None]:
    """(page, page_end, line_start, line_end) of event text [start, end), from the event's stored span and its text.

    Lines: the event's `line_start` is the line of its first non-blank character (sources.SourceDocument.locate), so
    a quote's line is that plus the newlines between that character and the quote; exact.
    Pages: a PDF's pages are joined with a blank line ("\\n\\n"), which paragraphs inside a page also produce, so
    the text alone does not say where a page ends. The quote's pages are bounded by counting blank lines: it starts
    at or after `page_end - (blank lines after its start)` and ends at or before `page_start + (blank lines before
    its end)`; clipped to the event's pages, that range is returned (exact when the event has one page or no blank
    line besides its page breaks, a superset otherwise: never a wrong page)."""
    ev = r.event
    text = ev.text
    first, last = _trimmed(text, 0, len(text))
    if ev.line_start is not None:
        # blocks (EPUB, HTML, Word) are separated by one blank line and hold none (documents/blocks.py)
        step = "\n\n" if r.document.kind in BLOCK_KINDS else "\n"
        a = ev.line_start + text.count(step, first, start)
        b = a + text.count(step, start, max(end - 1, start))
        return None, None, a, b
    if ev.page_start is not None:
        p0, p1 = ev.page_start, ev.page_end if ev.page_end is not None else ev.page_start
        if p0 == p1:
            return p0, p1, None, None
        # every page break is a "\n\n", so the quote starts no earlier than p1 minus the blank lines after its
        # start, and ends no later than p0 plus the blank lines before its end (lo <= hi always: each break is
        # counted on one side or the other)
        lo = max(p0, p1 - text.count("\n\n", start, last))
        hi = min(p1, p0 + text.count("\n\n", first, end))
        return lo, max(lo, hi), None, None
    return None, None, None, None


# -- evidence sentence by sentence ------------------------------------------------------------------------------------

@dataclass
class SentenceSupport:
    """One sentence of an answer and the quotes that support it (ALCE's unit: each sentence is attributed on its
    own, so a summary is not judged by whether one source sentence says all of it)."""

    sentence: str
    evidence: list[Evidence]
    supported: bool
    coverage: float
    # a quote was found, but the answer model read it and doubts it states the sentence (answer/claim_check.py):
    # not supported, and the quote is shown as the closest one
    doubted: bool = False
    # whether the answer model read the quote beside the sentence: None where no check applies (one sentence, no
    # quote, a model too small to judge); False where one applied and did not run (closed, failed, past the first
    # sentences checked), so `supported` there rests on the words alone
    checked: bool | None = None


def support_by_sentence(question: str, answer: str, retrieved: list[RetrievedEvent], max_quotes: int = 2,
                        embed=None) -> list[SentenceSupport]:
    """Each sentence of `answer` with the (at most `max_quotes`) source sentences holding most of its own words;
    supported when they hold at least SUPPORT_THRESHOLD of them. A sentence that paraphrases (a summary's does)
    can fail that and still be said by one source sentence: with `embed` (text -> unit vector), the source
    sentences sharing most words with it are compared by meaning, and one at PARAPHRASE_SIMILARITY or above
    supports it. A sentence adding no word to the question (a restatement) is left out."""
    units = [(i, s) for i, r in enumerate(retrieved) for s in split_sentences(r.event.text)] if embed else []
    unit_terms = [content_words(s.text) for _, s in units]
    out = []
    for span in split_sentences(answer):
        sentence = readable(span.text)
        own = content_words(sentence) - content_words(question)
        if not own:
            continue
        found = support(question, sentence, retrieved, max_quotes)
        if found.supported or not units:
            out.append(SentenceSupport(sentence, found.evidence if found.supported else [], found.supported,
                                       found.coverage))
            continue
        ranked = sorted(range(len(units)), key=lambda k: -len(unit_terms[k] & own))[:PARAPHRASE_CANDIDATES]
        ranked = [k for k in ranked if unit_terms[k] & own]
        best, score = None, 0.0
        if ranked:
            target = embed(sentence)
            for k in ranked:
                sim = float(target @ embed(units[k][1].text))
                if sim > score:
                    best, score = k, sim
        if best is not None and score >= PARAPHRASE_SIMILARITY:
            i, s = units[best]
            quote = Evidence(i, s.start, s.end, s.text, *locate(retrieved[i], s.start, s.end),
                             highlight=highlights(s.text, own))
            out.append(SentenceSupport(sentence, [quote], True, round(score, 3)))
        else:
            out.append(SentenceSupport(sentence, [], False, found.coverage))
    return out


# A paraphrase supports an answer sentence at this cosine (MiniLM, unit vectors) or above: fixed before any held-out
# answer was checked with it, on the usual reading of MiniLM similarities (unrelated sentences ~0.1-0.3, paraphrases
# ~0.7-0.9); high, because a false "supported" is worse than a missed one. docs/evaluation.md reports what it does.
PARAPHRASE_SIMILARITY = 0.7
PARAPHRASE_CANDIDATES = 12  # source sentences compared by meaning per answer sentence: those sharing most words
