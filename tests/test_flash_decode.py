"""epi's flash-decode patch (native/llama_cpp/flash-decode.patch) on the REAL bundled model, CPU: with flash attention
over more than 512 cells, decode steps (one token at a time: the decode kernel) and a prompt decoded as one batch
(the rows kernel; a question, and one longer than llama.cpp's 64-row tiles) give logits within a stated tolerance
of the softmax path (flash attention off), and hiding a block's cells in every layer is bit-identical to the block
being absent, as --layered relies on."""
from __future__ import annotations

import numpy as np
import pytest
from llama_cpp import llama_cpp as L

from conftest import license_text
from episodic_cli.engine.llama import layer_visibility
from llama_context import RawContext

N_CTX = 2048
TEXT = 1100          # cells before the question: llama.cpp's split-KV decode path needs >= 512
BLOCK = (300, 556)   # a 256-token block inside them, also in BLOCK_SEQ
BLOCK_SEQ = 1
QUESTION = " Question: what does the license say about patents and trademarks? Answer:"
# Flash attention (F16 mask, F32 accumulation, exp by blocks) and the softmax path (F32 mask, F16 products) round
# differently. Measured on this model and text (2 threads), the largest difference from the softmax path: epi's
# kernels 0.057 one token at a time, 0.049 for the question as one batch, 0.065 for the longer batch; llama.cpp's own
# kernels 0.105 (decode steps: V accumulated in F16, the query rounded to F16) and 0.159 (the question as one batch),
# which this bound refuses: so the test also fails on a build without epi's kernels.
TOLERANCE = 0.1

needs_patch = pytest.mark.skipif(not layer_visibility.available(), reason="llama-cpp-python without epi's patches")


@pytest.fixture(scope="module")
def tokens(bundled_model):
    text = bundled_model.tokenize(license_text())[:TEXT]
    assert len(text) == TEXT
    return text, bundled_model.tokenize(QUESTION)


def prefilled(model, tokens, flash_attn: bool) -> RawContext:
    """An answer-like context: the text in sequence 0, the block's cells also in BLOCK_SEQ."""
    text, _ = tokens
    c = RawContext(model, flash_attn, n_ctx=N_CTX, n_batch=512, n_seq_max=2)
    for start in range(0, TEXT, 512):
        c.decode(text[start:start + 512], start, last_only=True)
    L.llama_memory_seq_cp(c.memory, 0, BLOCK_SEQ, *BLOCK)
    return c


def step_by_step(c: RawContext, tokens) -> np.ndarray:
    """The question decoded one token at a time (each a decode step); the logits after each, then removed again."""
    _, question = tokens
    logits = np.concatenate([c.decode(question[i:i + 1], TEXT + i) for i in range(len(question))])
    L.llama_memory_seq_rm(c.memory, 0, TEXT, -1)
    return logits


def as_one_batch(c: RawContext, prompt: np.ndarray) -> np.ndarray:
    """`prompt` decoded as one batch after the text; the logits of every token, then removed again."""
    logits = c.decode(prompt, TEXT)
    L.llama_memory_seq_rm(c.memory, 0, TEXT, -1)
    return logits


def one_batch(c: RawContext, tokens) -> np.ndarray:
    """The question as one batch: a prompt of fewer than 64 rows."""
    _, question = tokens
    assert 2 <= len(question) < 64
    return as_one_batch(c, question)


def long_batch(c: RawContext, tokens) -> np.ndarray:
    """The question said 7 times as one batch: more rows than llama.cpp's 64-row tiles, which its tiled kernel took."""
    _, question = tokens
    prompt = np.tile(question, 7)
    assert 64 < len(prompt) < 512
    return as_one_batch(c, prompt)


QUESTION_PASSES = pytest.mark.parametrize("question_pass", [step_by_step, one_batch, long_batch],
                                          ids=["decode-steps", "one-batch", "long-batch"])


@needs_patch
@QUESTION_PASSES
def test_flash_attention_matches_the_softmax_path(bundled_model, tokens, question_pass):
    logits = {}
    for flash_attn in (False, True):
        c = prefilled(bundled_model, tokens, flash_attn)
        try:
            logits[flash_attn] = question_pass(c, tokens)
        finally:
            c.close()
    assert np.isfinite(logits[True]).all()
    diff = np.abs(logits[True] - logits[False]).max()
    print(f"max abs logit diff, flash vs softmax ({question_pass.__name__}): {diff:.4f}")
    assert diff < TOLERANCE, diff
    assert not np.array_equal(logits[True], logits[False])  # the flash kernel really ran
    assert (logits[True].argmax(axis=1) == logits[False].argmax(axis=1)).all()


@needs_patch
@QUESTION_PASSES
def test_a_block_hidden_is_exactly_the_block_absent(bundled_model, tokens, question_pass):
    # Reference: the block's cells only in BLOCK_SEQ (still occupied, so every other cell keeps its index)
    ref = prefilled(bundled_model, tokens, flash_attn=True)
    try:
        L.llama_memory_seq_rm(ref.memory, 0, *BLOCK)
        expected = question_pass(ref, tokens)
    finally:
        ref.close()

    c = prefilled(bundled_model, tokens, flash_attn=True)
    try:
        seen = question_pass(c, tokens)
        layer_visibility.set_hidden_seqs(c.ctx, -1, [BLOCK_SEQ])
        hidden = question_pass(c, tokens)
    finally:
        c.close()
    assert np.array_equal(hidden, expected), np.abs(hidden - expected).max()  # exact: max abs diff 0.0
    assert np.abs(seen - expected).max() > 0.5  # the block matters to the question, so the test can fail
