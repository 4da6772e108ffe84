"""Which hit a retrieved event belongs to, and what follows from it: the answer prompt's layout (best hit last, each
neighbour beside its hit in reading order) and EpMAN's weights (a neighbour takes its hit's)."""
from __future__ import annotations

from types import SimpleNamespace

from episodic_cli.engine.retrieval.weights import EPMAN_FLOOR, episodic_weights
from episodic_cli.engine.retrieval.retrieve import relevance_order


def item(doc: int, ordinal: int, score: float | None = None, rank: int | None = None):
    return SimpleNamespace(event=SimpleNamespace(id=doc * 100 + ordinal, document_id=doc, ordinal=ordinal),
                           score=score, rank=rank)


def layout(items) -> list[tuple[int, int]]:
    return [(r.event.document_id, r.event.ordinal) for r in relevance_order(items)]


def test_best_hit_goes_last_with_its_neighbours_around_it():
    # document order, as retrieve() returns it: hit A (doc 1, ordinal 5) is the best, hit B (doc 1, 20) second,
    # hit C (doc 2, 3) third; the others are neighbours
    got = [item(1, 4), item(1, 5, 0.9, 0), item(1, 6), item(1, 19), item(1, 20, 0.5, 1), item(1, 21),
           item(2, 2), item(2, 3, 0.2, 2), item(2, 4)]
    assert layout(got) == [(2, 2), (2, 3), (2, 4), (1, 19), (1, 20), (1, 21), (1, 4), (1, 5), (1, 6)]


def test_a_neighbour_between_two_hits_joins_the_nearer_one_and_nothing_is_lost():
    got = [item(1, 1, 0.3, 1), item(1, 2), item(1, 4, 0.8, 0)]
    assert layout(got) == [(1, 1), (1, 2), (1, 4)]
    got = [item(1, 1, 0.8, 0), item(1, 3), item(1, 4, 0.3, 1)]
    assert layout(got) == [(1, 3), (1, 4), (1, 1)]  # ordinal 3 is nearer hit 4 than hit 1


def test_no_hits_keeps_the_order():
    got = [item(1, 1), item(1, 2)]
    assert layout(got) == [(1, 1), (1, 2)]


def test_epman_weights_run_from_the_floor_to_one_and_neighbours_take_their_hits():
    got = [item(1, 1, 0.8, 0), item(1, 2), item(1, 3), item(1, 4, 0.3, 2), item(2, 7), item(2, 8, 0.5, 1)]
    weights = episodic_weights(got)
    middle = EPMAN_FLOOR + (1.0 - EPMAN_FLOOR) * (0.5 - 0.3) / (0.8 - 0.3)
    assert weights == [1.0, 1.0, EPMAN_FLOOR, EPMAN_FLOOR, middle, middle]
    assert episodic_weights([item(1, 1, 0.4, 0), item(1, 2)]) == [1.0, 1.0]  # one hit: nothing to scale
    assert episodic_weights([item(1, 1), item(1, 2)]) == [1.0, 1.0]
