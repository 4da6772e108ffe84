"""epi's llama.cpp patch (native/llama_cpp/layer-visibility.patch) on the REAL bundled model, CPU, with flash
attention off and on: the installed library exports the entry points; hiding a block's sequence in every layer
gives exactly the logits of the block being invisible; hiding nothing is exactly the unpatched graph; hiding in
some layers only changes the logits; a reused graph follows the latest setting; an unpatched library reports the
feature off."""
from __future__ import annotations

import ctypes
from importlib import metadata

import llama_cpp
import numpy as np
import pytest
from llama_cpp import llama_cpp as L

from conftest import license_text
from episodic_cli.engine.llama import layer_visibility
from llama_context import RawContext

N_SEQ_MAX = 4
BLOCK_SEQ = 1  # the block's cells are in sequence 0 and also in this one, as kv mode's pool blocks are
EMPTY_SEQ = 3  # a sequence no cell belongs to
QUESTION = " Question: what does the license say about patents? Answer:"

needs_patch = pytest.mark.skipif(not layer_visibility.available(), reason="llama-cpp-python without epi's patch "
                                 "(test_patched_build_exports_entry_points fails for it)")


@pytest.fixture(scope="module")
def texts(bundled_model):
    """128 tokens of real prose with a 64-token block in the middle, and a question after them."""
    text = bundled_model.tokenize(license_text())[:128]
    return text, (32, 96), bundled_model.tokenize(QUESTION)


def prefilled(model, texts, flash_attn: bool) -> RawContext:
    """The text in sequence 0 at positions 0.., the block's cells also in BLOCK_SEQ."""
    text, (b0, b1), _ = texts
    c = RawContext(model, flash_attn, n_seq_max=N_SEQ_MAX)
    c.decode(text, 0)
    L.llama_memory_seq_cp(c.memory, 0, BLOCK_SEQ, b0, b1)
    return c


def ask(c: RawContext, texts) -> np.ndarray:
    """Decode the question after the text (logits of all its tokens), then remove it again."""
    text, _, question = texts
    logits = c.decode(question, len(text))
    L.llama_memory_seq_rm(c.memory, 0, len(text), -1)
    return logits


def test_patched_build_exports_entry_points():
    assert layer_visibility.available(), layer_visibility.UNAVAILABLE
    for name in ("llama_set_layer_hidden_seqs", "llama_clear_layer_hidden_seqs"):
        assert hasattr(L._lib, name)
    # the local label tells the KV tier that the patched build made the blocks; it still satisfies ==0.3.36
    assert llama_cpp.__version__.startswith("0.3.36+epi"), llama_cpp.__version__
    assert metadata.version("llama-cpp-python") == llama_cpp.__version__


@needs_patch
@pytest.mark.parametrize("flash_attn", [False, True], ids=["flash-attn-off", "flash-attn-on"])
def test_hidden_in_every_layer_is_exactly_the_block_invisible(bundled_model, texts, flash_attn):
    _, (b0, b1), _ = texts
    # Reference: the block's cells only in BLOCK_SEQ, so sequence 0's question cannot see them. They stay occupied
    # on purpose: removing them lets the question's cells land in the freed ones, and attention then sums over the
    # cells in another order (a C check measured logits 1.05 apart from that alone).
    ref = prefilled(bundled_model, texts, flash_attn)
    L.llama_memory_seq_rm(ref.memory, 0, b0, b1)
    expected = ask(ref, texts)
    ref.close()

    c = prefilled(bundled_model, texts, flash_attn)
    try:
        seen = ask(c, texts)
        layer_visibility.set_hidden_seqs(c.ctx, -1, [BLOCK_SEQ])
        hidden = ask(c, texts)
    finally:
        c.close()
    assert np.isfinite(hidden).all()
    assert np.array_equal(hidden, expected), np.abs(hidden - expected).max()  # exact: max abs diff 0.0
    assert np.abs(seen - expected).max() > 1.0  # the block matters to the question, so the test can fail


@needs_patch
@pytest.mark.parametrize("flash_attn", [False, True], ids=["flash-attn-off", "flash-attn-on"])
def test_hiding_nothing_is_exactly_the_unpatched_graph(bundled_model, texts, flash_attn):
    c = prefilled(bundled_model, texts, flash_attn)
    try:
        unpatched = ask(c, texts)  # nothing was ever set: the graph has no extra input
        # a sequence no cell is in: the graph has the extra input, every row of it zeros
        layer_visibility.set_hidden_seqs(c.ctx, -1, [EMPTY_SEQ])
        zeros_added = ask(c, texts)
        layer_visibility.set_hidden_seqs(c.ctx, -1, [BLOCK_SEQ])
        layer_visibility.set_hidden_seqs(c.ctx, -1, [])  # every layer shown everything again
        emptied = ask(c, texts)
        layer_visibility.set_hidden_seqs(c.ctx, -1, [BLOCK_SEQ])
        layer_visibility.clear(c.ctx)
        cleared = ask(c, texts)
    finally:
        c.close()
    for logits in (zeros_added, emptied, cleared):
        assert np.array_equal(logits, unpatched), np.abs(logits - unpatched).max()


@needs_patch
@pytest.mark.parametrize("flash_attn", [False, True], ids=["flash-attn-off", "flash-attn-on"])
def test_hiding_in_some_layers_changes_the_logits_and_a_reused_graph_follows(bundled_model, texts, flash_attn):
    n_layer = bundled_model.info.n_layer
    lower, upper = range(n_layer // 2), range(n_layer // 2, n_layer)
    c = prefilled(bundled_model, texts, flash_attn)
    try:
        seen = ask(c, texts)
        layer_visibility.set_hidden_seqs(c.ctx, -1, [BLOCK_SEQ])
        hidden = ask(c, texts)
        layer_visibility.clear(c.ctx)
        for layer in lower:
            layer_visibility.set_hidden_seqs(c.ctx, layer, [BLOCK_SEQ])
        lower_hidden = ask(c, texts)
        # same graph (something is still hidden), other layers: set_input must read the new setting
        for layer in lower:
            layer_visibility.set_hidden_seqs(c.ctx, layer, [])
        for layer in upper:
            layer_visibility.set_hidden_seqs(c.ctx, layer, [BLOCK_SEQ])
        upper_hidden = ask(c, texts)
    finally:
        c.close()
    fresh = prefilled(bundled_model, texts, flash_attn)
    try:
        for layer in upper:
            layer_visibility.set_hidden_seqs(fresh.ctx, layer, [BLOCK_SEQ])
        upper_fresh = ask(fresh, texts)
    finally:
        fresh.close()
    for partial in (lower_hidden, upper_hidden):
        assert np.abs(partial - seen).max() > 0.1
        assert np.abs(partial - hidden).max() > 0.1
    assert np.abs(lower_hidden - upper_hidden).max() > 0.1
    assert np.array_equal(upper_hidden, upper_fresh), np.abs(upper_hidden - upper_fresh).max()


@needs_patch
def test_flash_attention_is_really_on_in_the_flash_attention_tests(bundled_model, texts):
    """The flash-attention cases above prove something only if llama.cpp took that path: its F16 mask and kernel
    give slightly different logits from the F32 softmax path."""
    logits = {}
    for flash_attn in (False, True):
        c = prefilled(bundled_model, texts, flash_attn)
        logits[flash_attn] = ask(c, texts)
        c.close()
    assert not np.array_equal(logits[False], logits[True])
    assert np.abs(logits[False] - logits[True]).max() < 1.0


@needs_patch
def test_bad_layer_or_sequence_is_refused(bundled_model):
    c = RawContext(bundled_model, flash_attn=False, n_seq_max=N_SEQ_MAX)
    try:
        for layer, seqs in ((bundled_model.info.n_layer, [BLOCK_SEQ]), (-2, [BLOCK_SEQ]), (0, [N_SEQ_MAX]), (0, [-1])):
            with pytest.raises(ValueError, match="refused"):
                layer_visibility.set_hidden_seqs(c.ctx, layer, seqs)
    finally:
        c.close()


def test_an_unpatched_library_reports_the_feature_off(monkeypatch):
    # libggml-base sits beside libllama and lacks the patch's functions, as an unpatched libllama does
    ggml_base = [ctypes.CDLL(str(p)) for p in L._base_path.glob("libggml-base.*") if p.suffix in (".so", ".dylib")]
    if not ggml_base:
        pytest.skip("no libggml-base beside libllama to stand in for an unpatched library")
    assert layer_visibility._load(ggml_base[0]) is None
    monkeypatch.setattr(layer_visibility, "_functions", None)
    assert not layer_visibility.available()
    with pytest.raises(RuntimeError, match="install.sh"):
        layer_visibility.set_hidden_seqs(None, 0, [1])


def test_doctor_names_a_patched_build_without_epis_flash_kernels(monkeypatch):
    from episodic_cli.engine import diagnostics

    assert [diagnostics.patch_level(v) for v in ("0.3.36", "0.3.36+epi1", "0.3.36+epi2", "0.3.36+epi12")] == [0, 1, 2, 12]
    if not layer_visibility.available():
        pytest.skip("llama-cpp-python without epi's patches")
    assert diagnostics.layered_attention().startswith("available: ")  # the installed build has both patches
    monkeypatch.setattr(diagnostics, "llama_cpp_version", lambda: "0.3.36+epi1")
    dated = diagnostics.layered_attention()
    assert "predates epi's flash-decode kernel" in dated and "./install.sh" in dated
    monkeypatch.setattr(diagnostics, "llama_cpp_version", lambda: "0.3.36+epi2")
    dated = diagnostics.layered_attention()
    assert "predates epi's flash kernel for prompts" in dated and "./install.sh" in dated
    monkeypatch.setattr(layer_visibility, "_functions", None)
    assert "not in this build" in diagnostics.layered_attention()
