"""The tiny second-vocabulary model (tests/tiny_gguf.py) is deterministic and runs through epi's own backend: it loads,
is servable, tokenizes any UTF-8 text with its SentencePiece vocabulary and back, renders ChatML, decodes and
generates, and its KV cache captures and parses like the bundled model's."""
from __future__ import annotations

import numpy as np

from tiny_gguf import HEAD_DIM, N_EMBD, N_HEAD_KV, N_LAYER, write_tiny_model

BUNDLED_N_VOCAB = 49_152  # SmolLM2's GPT-2-style BPE vocabulary


def test_tiny_model_is_deterministic_and_small(tmp_path):
    a = write_tiny_model(tmp_path / "a.gguf", seed=3).read_bytes()
    b = write_tiny_model(tmp_path / "b.gguf", seed=3).read_bytes()
    c = write_tiny_model(tmp_path / "c.gguf", seed=4).read_bytes()
    assert a == b and a != c
    assert a[:4] == b"GGUF" and len(a) < 2 * 2**20


def test_tiny_model_runs_through_the_backend(tmp_path):
    from episodic_cli.engine.kv.blocks import capture_block, parse_state_blob
    from episodic_cli.engine.llama.backend import LlamaModel, LlamaSession

    model = LlamaModel(write_tiny_model(tmp_path / "tiny.gguf"))
    try:
        info = model.info
        assert model.cannot_answer_reason() is None and model.block_reuse_reason() is None
        assert (info.architecture, info.n_layer, info.n_embd, info.n_head_kv) == ("llama", N_LAYER, N_EMBD, N_HEAD_KV)
        assert info.n_ctx_train >= 2048
        assert model.meta("tokenizer.ggml.model") == "llama"  # SentencePiece-style, not GPT-2 BPE
        assert info.n_vocab != BUNDLED_N_VOCAB and info.n_vocab < 2000
        assert (N_HEAD_KV * HEAD_DIM) % 32 == 0  # q8_0 / q4_0 KV rows

        # Any UTF-8 text tokenizes (byte fallback) and detokenizes exactly; word pieces carry their space as "▁".
        for text in ["Hello wörld 123", "the answer", " leading space", "日本語 🎉\ttab\nline", "a"]:
            ids = model.tokenize(text)
            assert len(ids) and model.detokenize(ids) == text, text
        assert model.pieces()[int(model.tokenize("the book")[-1])] == b" book"

        # ChatML: control tokens are single tokens when parsed as special, <|im_end|> ends generation.
        im_start, im_end = model.tokenize("<|im_start|><|im_end|>", special=True).tolist()
        assert len(model.tokenize("<|im_start|>")) > 1  # plain text when not parsed as special
        assert model.is_end_of_generation(im_end) and not model.is_end_of_generation(im_start)
        prompt = model.apply_chat_template([{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": "Where is the key?"}])
        assert prompt == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhere is the key?<|im_end|>\n"
                          "<|im_start|>assistant\n")
        assert model.tokenize(prompt, special=True)[0] == im_start

        session = LlamaSession(model, n_ctx=1024, n_seq_max=2)
        try:
            tokens = model.tokenize("the answer to the question is on page one of the book. " * 30)[:300]
            assert len(tokens) == 300
            next_pos = session.prefill(tokens)
            assert next_pos == 300
            assert isinstance("".join(session.generate(next_pos, 5)), str)

            session.clear()
            session.prefill(tokens[:100])
            block = parse_state_blob(capture_block(session, 0, 10, 50))
            assert block.positions.tolist() == list(range(10, 50))
            assert block.k.shape == block.v.shape == (N_LAYER, 40, N_HEAD_KV * HEAD_DIM)
            assert block.k.dtype == np.float16 and np.isfinite(block.k).all() and np.abs(block.k).max() > 0
        finally:
            session.close()
    finally:
        model.close()
