"""The per-layer block selection kernels (native/src/block_select.c) against their numpy references.

Scores: the kernel and the reference both accumulate in double and round once to float32; they sum in different
orders, so they may differ in the last float32 bit: rtol 1e-6 (measured: bit-identical on 20 random pools of
the bundled model's shape).
Selection is exact: given the same scores, the same blocks, bit for bit, ties and NaNs included."""
import numpy as np
import pytest

from episodic_cli import native
from episodic_cli.native import reference

SCORE_RTOL = 1e-6


def random_pool(rng, n_layer=30, n_head=9, n_head_kv=3, head_dim=64, n_blocks=24, n_rep=4):
    query = rng.standard_normal((n_layer, n_head, head_dim)).astype(np.float32)
    keys = (rng.standard_normal((n_blocks, n_layer, n_rep, n_head_kv * head_dim)) * 3).astype(np.float16)
    count = rng.integers(0, n_rep + 1, n_blocks).astype(np.int32)
    return query, keys, count


@pytest.mark.parametrize("shape", [dict(), dict(n_head=4, n_head_kv=4, head_dim=32), dict(n_head=8, n_head_kv=1),
                                   dict(n_blocks=1, n_layer=1), dict(n_blocks=0)])
def test_block_scores_match_reference(shape):
    query, keys, count = random_pool(np.random.default_rng(7), **shape)
    np.testing.assert_allclose(native.block_scores(query, keys, count), reference.block_scores(query, keys, count),
                               rtol=SCORE_RTOL, atol=1e-6)


def test_a_block_holding_the_query_direction_scores_highest_in_every_layer():
    rng = np.random.default_rng(1)
    query, keys, _ = random_pool(rng, n_blocks=6)
    keys[:] = (rng.standard_normal(keys.shape) * 0.1).astype(np.float16)
    # block 4's keys point along each layer's query (KV head g gets the sum of its query heads' directions)
    per_kv = query.reshape(30, 3, 3, 64).sum(axis=2).reshape(30, 192)
    keys[4] = (per_kv[:, None, :] / np.abs(per_kv).max()).astype(np.float16)
    scores = native.block_scores(query, keys, np.full(6, 4, np.int32))
    assert (scores.argmax(axis=1) == 4).all()


def test_padding_rows_past_the_count_are_never_read():
    query, keys, _ = random_pool(np.random.default_rng(2), n_blocks=3)
    count = np.array([1, 2, 4], np.int32)
    poisoned = keys.copy()
    poisoned[0, :, 1:] = np.float16(np.nan)
    poisoned[1, :, 2:] = np.float16(np.inf)
    np.testing.assert_array_equal(native.block_scores(query, poisoned, count), native.block_scores(query, keys, count))


@pytest.mark.parametrize("seed", range(5))
def test_selection_matches_reference_exactly(seed):
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((30, 24)).astype(np.float32)
    scores[3, :6] = 0.5  # ties: the lower index wins
    scores[5, 2] = np.nan  # ranks last
    n_tokens = rng.integers(20, 400, 24).astype(np.int32)
    for budget in (0, 150, 2048, 10**6):
        visible = native.select_blocks(scores, n_tokens, budget)
        np.testing.assert_array_equal(visible, reference.select_blocks(scores, n_tokens, budget))
        assert (visible * n_tokens).sum(axis=1).max() <= budget


def test_selection_keeps_the_best_that_fit_and_passes_over_one_too_big():
    scores = np.array([[3.0, 2.0, 1.0, 0.0]], np.float32)
    visible = native.select_blocks(scores, np.array([100, 900, 200, 50], np.int32), budget=400)
    assert visible.tolist() == [[True, False, True, True]]


def test_bad_shapes_are_refused():
    query, keys, count = random_pool(np.random.default_rng(3), n_blocks=2)
    with pytest.raises(ValueError):
        native.block_scores(query[:, :8], keys, count)  # 8 query heads on 3 KV heads
    with pytest.raises(ValueError):
        native.block_scores(query, keys, np.array([5, 1], np.int32))  # more keys than rows
    with pytest.raises(ValueError):
        native.select_blocks(np.zeros((2, 3), np.float32), np.zeros(2, np.int32), 10)
