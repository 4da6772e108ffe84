"""Event retrieval: dense similarity + a lexical channel, then temporal contiguity, in document order.

- Dense (hnswlib over MiniLM embeddings) finds paraphrases; lexical (SQLite FTS5/BM25) finds exact identifiers and
  renamed entities that dense retrieval misses (measured: dense alone found 2/5 code answers). The two rankings are
  fused by reciprocal rank, which needs no score calibration between them, and each channel's first choice is a hit
  whatever its fused rank (`with_leaders_first`; its effect on source recall: docs/evaluation.md).
- Each hit brings its previous and next event of the same document (EpMAN BroadAttn, EM-LLM's contiguity buffer):
  the largest inference-time gain in the seeds, and the remedy for facts split across an event boundary.
- Events are chosen in document order (EpMAN) within a token budget; hits win over neighbours when it is tight.
- The answer prompt lays them out best hit last (`relevance_order`): the small model copies from the source nearest
  the question, so that should be the best one (measured on the evaluation's passkey/NITH sets: docs/evaluation.md).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...store import DocumentRecord, EventDamagedError, EventRecord, Store
from ..documents.structure import decode as decode_section

RRF_K = 60  # the usual reciprocal-rank-fusion constant; it damps the weight of the very first ranks
BOOST = 1.0  # added to the fused score of a boosted event: more than any fused score (at most 2 / 61) can differ


@dataclass
class RetrievedEvent:
    event: EventRecord
    document: DocumentRecord
    score: float | None      # fused retrieval score for a hit; None for an event added as a neighbour
    rank: int | None         # 0 = best hit
    # The place to cite when the question named a section this event spans but does not mostly hold (set by the
    # workspace from the question's scope); None: the event's own stored section.
    cited_section: dict | None = None
    # A summary of the map read as a source (summary_sources.py; store/summaries.py's SummaryRecord), not an event:
    # its `event` is a stand-in holding the summary's text, with a negative id.
    summary: object | None = None

    @property
    def section(self) -> dict | None:
        """Where the event sits in its document's structure, as its citation shows it (structure.decode's form)."""
        return self.cited_section if self.cited_section is not None else decode_section(self.event.section)

    @property
    def n_tokens(self) -> int:
        return self.event.token_end - self.event.token_start


def fuse(rankings: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: score(id) = sum over rankings of 1 / (RRF_K + rank)."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, (event_id, _) in enumerate(ranking):
            scores[event_id] = scores.get(event_id, 0.0) + 1.0 / (RRF_K + rank + 1)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def with_leaders_first(fused: list[tuple[int, float]], rankings: list[list[tuple[int, float]]]
                       ) -> list[tuple[int, float]]:
    """The fused ranking with each channel's best event moved to the front (in fused order), so that every channel's
    first choice is a hit. Reciprocal rank fusion alone ranks an event that both channels place fifth above one that
    only the lexical channel places first, yet that one is often the only event holding a question's rare
    identifier (held-out code sets: platformdirs' `AppDirs` alias was lexical rank 1, dense rank 36, fused rank 9)."""
    leaders = {ranking[0][0] for ranking in rankings if ranking}
    best = fused[0][1] if fused else 0.0  # a leader scores as the best fused event, so relevance_order and EpMAN
    return ([(i, max(s, best)) for i, s in fused if i in leaders]  # weights treat it as a best hit, not its old rank
            + [h for h in fused if h[0] not in leaders])


def retrieve(
    store: Store,
    query_vector: np.ndarray,
    question: str,
    k: int,
    neighbours: int = 1,
    token_budget: int = 3000,
    lexical: bool = True,
    allowed: set[int] | None = None,
    boosted: set[int] | None = None,
    damaged: list[EventDamagedError] | None = None,
    passage_ranking: Callable[[list[EventRecord]], list[tuple[int, float]]] | None = None,
) -> list[RetrievedEvent]:
    """Top-k events by fused similarity, each with +-`neighbours` adjacent events, de-duplicated, in document order,
    holding at most `token_budget` tokens (the best hit is always kept).

    `allowed` (a question's chapter, section or page, `--doc`: scope.py) restricts hits and neighbours to
    those event ids; `boosted` (the code symbols a question names) puts the best of those events first. With
    `damaged`, an event whose row fails its checksum is left out and its error appended there (else it raises)."""
    pool = max(4 * k, 20)
    rankings = [store.search_dense(query_vector, pool, within=allowed)]
    if lexical:
        rankings.append(store.search_lexical(question, pool, within=allowed))
    channels = rankings
    candidate_ids = list(dict.fromkeys(i for ranking in rankings for i, _ in ranking))
    if passage_ranking is not None and candidate_ids:
        # The candidates both channels found, ranked again by their best sentence, as a third fused ranking; only
        # the first two channels' leaders are seated first (passage_rank.py).
        candidates = store.get_events(candidate_ids, [])  # a damaged one is named when it is a hit
        channels = rankings + [passage_ranking(candidates)]
    fused = with_leaders_first(fuse(channels), rankings)
    inside = boosted if allowed is None or boosted is None else boosted & allowed
    if inside:
        # The best event of the named symbols goes first, the others keep their places: a question often names a
        # symbol as a landmark ("a file under user_config_path"), and every definition of that name filled all k hits.
        first = fuse([store.search_dense(query_vector, pool, within=inside)]
                     + ([store.search_lexical(question, pool, within=inside)] if lexical else []))[:1]
        seated = {i for i, _ in first}
        fused = [(i, s + BOOST) for i, s in first] + [(i, s) for i, s in fused if i not in seated]
    hits = fused[:k]
    chosen: dict[int, RetrievedEvent] = {}
    docs: dict[int, DocumentRecord] = {}
    used = 0
    by_id = {e.id: e for e in store.get_events([h[0] for h in hits], damaged)}
    for rank, (event_id, score) in enumerate(hits):
        event = by_id.get(event_id)
        if event is None:  # removed by a concurrent ingest after the index was loaded, or damaged
            continue
        if event.id in chosen:  # already present as a neighbour of a better hit: promote it
            chosen[event.id].score, chosen[event.id].rank = score, rank
            continue
        doc = docs.setdefault(event.document_id, store.get_document(event.document_id))
        group = [RetrievedEvent(event, doc, score, rank)]
        for d in range(1, neighbours + 1):
            for ordinal in (event.ordinal - d, event.ordinal + d):
                nb = store.event_at(event.document_id, ordinal, damaged) if ordinal >= 0 else None
                if nb is not None and nb.id not in chosen and (allowed is None or nb.id in allowed):
                    group.append(RetrievedEvent(nb, doc, None, None))
        for item in group:
            if item.event.id in chosen:
                continue
            if chosen and used + item.n_tokens > token_budget:
                continue
            chosen[item.event.id] = item
            used += item.n_tokens
    return sorted(chosen.values(), key=lambda r: (r.document.display_path, r.event.ordinal))


def owning_hit(r: RetrievedEvent, hits: list[RetrievedEvent]) -> RetrievedEvent:
    """The hit an event was retrieved for: itself if it is a hit, else the nearest hit of its document (the better
    one on a tie); any hit if its document has none."""
    if r.score is not None:
        return r
    same = [h for h in hits if h.event.document_id == r.event.document_id] or hits
    return min(same, key=lambda h: (abs(h.event.ordinal - r.event.ordinal), h.rank))


def relevance_order(items: list[RetrievedEvent]) -> list[RetrievedEvent]:
    """The retrieved events in ascending relevance, best hit last (Focused Learning's re-rank); a neighbour travels
    with the nearest hit of its document, in reading order around it."""
    hits = [r for r in items if r.score is not None]
    if not hits:
        return list(items)
    groups: dict[int, list[RetrievedEvent]] = defaultdict(list)
    for r in items:
        groups[owning_hit(r, hits).event.id].append(r)
    out = []
    for h in sorted(hits, key=lambda h: h.score):
        out.extend(sorted(groups[h.event.id], key=lambda r: r.event.ordinal))
    return out
