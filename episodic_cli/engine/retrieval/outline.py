"""An extractive outline of a part read whole: one sentence from each stretch of it, in order, so that a small model
asked to summarise a chapter has the chapter's course in front of it from start to end. Read whole from its
blocks, the 1.5B model kept one incidental detail or joined real names into events that are not there
(docs/heldout.md, "Two more sets nobody tuned on").

Each of OUTLINE_SENTENCES stretches of about equal length gives its most central sentence: the one whose content
words are most shared with the other sentences of the stretch (TF-IDF vectors, mean cosine similarity: the
centroid form of TextRank). Fixed before any answer was read with it; no model, no store.
"""
from __future__ import annotations

import math
from collections import Counter

from .evidence import STOP_WORDS, split_sentences, stem, words

OUTLINE_SENTENCES = 6
# A sentence is a candidate when it has this many words: shorter ones are dialogue tags ("said she."), longer ones
# whole paragraphs of reflection that a line of the outline would only cut.
MIN_WORDS, MAX_WORDS = 6, 60


def _terms(text: str) -> Counter:
    return Counter(stem(w.lower()) for w in words(text) if w.lower() not in STOP_WORDS)


def key_sentences(texts: list[str], n: int = OUTLINE_SENTENCES) -> list[str]:
    """The most central sentence of each of `n` consecutive stretches of `texts` (a part's events, in order)."""
    sentences = [" ".join(s.text.split()) for t in texts for s in split_sentences(t)]
    if not sentences:
        return []
    lengths = [len(s.split()) for s in sentences]
    total = sum(lengths)
    stretches: list[list[int]] = [[] for _ in range(min(n, len(sentences)))]
    seen = 0
    for i, length in enumerate(lengths):
        stretches[min(len(stretches) - 1, seen * len(stretches) // max(1, total))].append(i)
        seen += length
    terms = [_terms(s) for s in sentences]
    df = Counter(w for t in terms for w in t)
    idf = {w: math.log((len(terms) + 1) / (c + 0.5)) for w, c in df.items()}
    vectors = []
    for t in terms:
        v = {w: c * idf[w] for w, c in t.items()}
        norm = math.sqrt(sum(x * x for x in v.values())) or 1.0
        vectors.append({w: x / norm for w, x in v.items()})
    chosen = []
    for stretch in stretches:
        pool = [i for i in stretch if MIN_WORDS <= lengths[i] <= MAX_WORDS] or stretch
        if not pool:
            continue

        def centrality(i: int) -> float:
            return sum(sum(x * vectors[j].get(w, 0.0) for w, x in vectors[i].items()) for j in stretch if j != i)

        chosen.append(sentences[max(pool, key=lambda i: (centrality(i), -i))])
    return chosen
