"""The C kernels against their numpy references (tolerances stated per kernel)."""
import numpy as np
import pytest

from episodic_cli import native
from episodic_cli.native import reference

# The kernel's exp is a float polynomial (relative error ~1e-7 per term) summed in double, its output float32:
# 1e-5 is the float32 rounding of the result with room to spare (measured: under 2e-9 before that rounding).
SURPRISE_RTOL, SURPRISE_ATOL = 1e-5, 1e-5


@pytest.mark.parametrize("n_rows,n_vocab,scale", [(1, 5, 1.0), (17, 49152, 8.0), (64, 1000, 40.0), (3, 49157, 300.0)])
def test_surprise_matches_reference(n_rows, n_vocab, scale):
    rng = np.random.default_rng(n_rows)
    logits = (rng.standard_normal((n_rows, n_vocab)) * scale).astype(np.float32)
    targets = rng.integers(0, n_vocab, n_rows).astype(np.int32)
    np.testing.assert_allclose(native.surprise(logits, targets), reference.surprise(logits, targets),
                               rtol=SURPRISE_RTOL, atol=SURPRISE_ATOL)


def test_surprise_is_zero_for_certain_token_and_log_v_for_uniform():
    logits = np.zeros((2, 10), dtype=np.float32)
    logits[0, 3] = 1000.0
    out = native.surprise(logits, np.array([3, 7], dtype=np.int32))
    assert out[0] == pytest.approx(0.0, abs=1e-6)
    assert out[1] == pytest.approx(np.log(10.0), rel=1e-6)


def test_surprise_rejects_bad_targets():
    logits = np.zeros((2, 10), dtype=np.float32)
    with pytest.raises(ValueError):
        native.surprise(logits, np.array([3, 10], dtype=np.int32))
    with pytest.raises(ValueError):
        native.surprise(logits, np.array([3], dtype=np.int32))
