"""The architectures people run, each as a tiny random-weight GGUF in its own tensor layout (tests/tiny_gguf.py),
through epi's own backend (docs/architectures.md has the matrix and the numbers).

For every architecture: the model loads and reads back as what it is; its chat template and end-of-turn token come
from the GGUF (llama.cpp renders the template, the eos it names ends generation); the engine says whether it can
answer and whether blocks serve it.

Dense-attention architectures: a block of text prefilled after a prefix at one position, captured and stored (f16
payload), loaded into a fresh context at another position after other tokens, then a probe decoded after it,
gives the logits of the same text prefilled in place at that position (after the same prefix, which the probe does
not see), followed by the same probe. The move goes the way the engine moves blocks: epi's own rotation where the
model's RoPE is plain, llama.cpp's K-shift otherwise.

Gemma 3 (sliding-window layers): text mode, with the reason; its prompt renders and it generates from text.
Random weights give logits for these checks, not answers.
"""
from __future__ import annotations

import ctypes

import llama_cpp as L
import numpy as np
import pytest

from episodic_cli.engine.kv import blocks as K
from episodic_cli.engine.kv.keys import k_shift, rope_params
from tiny_gguf import ARCHS, HEAD_DIM, N_EMBD, N_HEAD_KV, N_LAYER, write_tiny_model

DENSE = [name for name, spec in ARCHS.items() if not spec.sliding_window]
SLIDING = [name for name, spec in ARCHS.items() if spec.sliding_window]

# Moving a block re-rotates its f16 K, and K rounds to f16 differently at other positions: the probe's logits move
# by up to 0.0092 of their standard deviation here (3 seeds x 6 architectures; 0.012 on the real Qwen2.5 0.5B in F16),
# as much as the same text prefilled at another position differs from itself, while K left unrotated moves them by
# 0.07-3.7 (bench/kv/swa_blocks.py, docs/architectures.md). 0.03: 3x the largest measured.
RELOCATION_RTOL = 0.03

PREFIX, BLOCK, OTHER, PROBE = 24, 96, 200, 8  # tokens: the block's prefix, the block, what precedes it later, probe
N_CTX = 512
MESSAGES = [{"role": "system", "content": "Answer from the archive."},
            {"role": "user", "content": "Where is the key of the book?"}]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """One loaded tiny model per architecture, written and loaded on first use."""
    from episodic_cli.engine.llama.backend import LlamaModel

    folder = tmp_path_factory.mktemp("archs")
    loaded: dict = {}

    def get(arch: str):
        if arch not in loaded:
            loaded[arch] = LlamaModel(write_tiny_model(folder / f"{arch}.gguf", seed=7, arch=arch))
        return loaded[arch]

    yield get
    for model in loaded.values():
        model.close()


def text_tokens(model, n: int) -> np.ndarray:
    words = ("the answer to the question is on page one of the book where the key was found by the people who "
             "made the archive of water and time ").split()
    rng = np.random.default_rng(11)
    tokens = model.tokenize(" ".join(rng.choice(words, size=4 * n)))
    assert len(tokens) >= n
    return tokens[:n]


def _logits(session, n: int) -> np.ndarray:
    ptr = ctypes.cast(L.llama_get_logits(session.ctx), ctypes.POINTER(ctypes.c_float))
    return np.ctypeslib.as_array(ptr, shape=(n, session.model.info.n_vocab)).copy()


def relocation_logits(model) -> tuple[np.ndarray, np.ndarray, str]:
    """(probe logits after the moved block, probe logits after the same text prefilled in place, how K was moved).

    Block: the prefix X at [0, PREFIX), the block B at [PREFIX, PREFIX + BLOCK), cells of B captured and stored.
    Moved: other tokens O at [0, OTHER) in a fresh context, B loaded at OTHER, the probe after it.
    In place: O at [0, OTHER) in sequence 0; X then B in sequence 1 ending where B starts at OTHER (so B sees X,
    as when it was captured, and not O); X's cells dropped, B's given to sequence 0; the probe after it."""
    from episodic_cli.engine.llama.backend import LlamaSession

    tokens = text_tokens(model, PREFIX + BLOCK + OTHER + PROBE)
    x, b = tokens[:PREFIX], tokens[PREFIX:PREFIX + BLOCK]
    other, probe = tokens[PREFIX + BLOCK:PREFIX + BLOCK + OTHER], tokens[-PROBE:]
    rows = np.ones(PROBE, dtype=np.int8)
    rope = k_shift(rope_params(model), model)
    session = LlamaSession(model, n_ctx=N_CTX, n_threads=1, n_seq_max=2)
    try:
        session.prefill(np.concatenate([x, b]))
        payload = K.encode_block(K.parse_state_blob(K.capture_block(session, 0, PREFIX, PREFIX + BLOCK)), "f16")

        session.clear()
        session.prefill(other)
        blob = K.state_blob_from_payload(payload, v_trans=K.session_v_trans(session), move_to=OTHER, rope=rope)
        end = K.load_block(session, blob, 0, OTHER)
        assert end == OTHER + BLOCK
        session.decode(probe, end, rows)
        moved = _logits(session, PROBE)

        session.clear()
        session.prefill(other)
        session.decode(np.concatenate([x, b]), OTHER - PREFIX, seq=K.STAGING_SEQ)  # [OTHER - PREFIX, OTHER + BLOCK)
        L.llama_memory_seq_rm(session.memory, K.STAGING_SEQ, OTHER - PREFIX, OTHER)
        L.llama_memory_seq_cp(session.memory, K.STAGING_SEQ, 0, -1, -1)
        L.llama_memory_seq_rm(session.memory, K.STAGING_SEQ, -1, -1)
        session.decode(probe, OTHER + BLOCK, rows)
        in_place = _logits(session, PROBE)
    finally:
        session.close()
    return moved, in_place, "epi" if rope is not None else "llama.cpp"


@pytest.mark.parametrize("arch", list(ARCHS))
def test_model_reads_back_and_chats_with_its_own_template(models, arch):
    spec = ARCHS[arch]
    model = models(arch)
    info = model.info
    assert (info.architecture, info.n_layer, info.n_embd, info.n_head_kv) == (arch, N_LAYER, N_EMBD, N_HEAD_KV)
    assert (N_HEAD_KV * HEAD_DIM) % 32 == 0  # q8_0 / q4_0 KV rows
    assert model.cannot_answer_reason() is None  # a decoder with a chat template
    assert info.chat_template == spec.chat_template  # from the GGUF, as written

    prompt = model.apply_chat_template(MESSAGES)
    assert "Where is the key of the book?" in prompt and "Answer from the archive." in prompt
    assert prompt.rstrip("\n").endswith(spec.generation_prompt.rstrip("\n")), (arch, prompt)

    eos = int(model.meta("tokenizer.ggml.eos_token_id"))
    assert model.tokenize(spec.eos, special=True).tolist() == [eos]
    assert model.is_end_of_generation(eos)
    (turn,) = model.tokenize(spec.turn_start, special=True).tolist()
    assert not model.is_end_of_generation(turn)


# llama.cpp renders a template by recognising its format (src/llama-chat.cpp); OLMo 2's (<|user|> and <|assistant|>
# with eos_token, no <|end|>) is taken for GLM-Edge's, which leaves out the newline after each turn and after
# "<|assistant|>". Qwen3's template closes an empty <think> block when thinking is off (epi answers at once), which
# llama.cpp's ChatML does not write. The engine renders those two with the GGUF's own Jinja
# (engine/llama/chat_template.py); for the others llama.cpp's rendering is the template's, and it renders.
MISRENDERED_BY_LLAMA_CPP = {"olmo2", "qwen3"}


@pytest.mark.parametrize("arch", list(ARCHS))
def test_the_prompt_ends_with_the_templates_own_generation_prompt(models, arch):
    from episodic_cli.engine.llama.chat_template import JINJA, LLAMA_CPP

    model = models(arch)
    prompt = model.apply_chat_template(MESSAGES)
    assert prompt.endswith(ARCHS[arch].generation_prompt), (arch, prompt)
    assert model.template_renderer == (JINJA if arch in MISRENDERED_BY_LLAMA_CPP else LLAMA_CPP)
    assert prompt == model._jinja.render(MESSAGES)  # whichever renders, the GGUF's template is what it says


@pytest.mark.parametrize("arch", DENSE)
def test_a_moved_block_gives_the_logits_of_its_text_in_place(models, arch):
    model = models(arch)
    assert model.block_reuse_reason() is None
    moved, in_place, mover = relocation_logits(model)
    diff = float(np.abs(moved - in_place).max() / in_place.std())
    assert diff <= RELOCATION_RTOL, (arch, mover, diff)
    assert np.array_equal(moved.argmax(axis=1), in_place.argmax(axis=1)), (arch, mover)
    assert np.abs(in_place).max() > 1.0  # the probe's logits are not flat: the comparison means something


@pytest.mark.parametrize("arch", SLIDING)
def test_a_sliding_window_model_answers_from_text(models, arch):
    from episodic_cli.engine.llama.backend import LlamaSession

    model = models(arch)
    reason = model.block_reuse_reason()
    assert reason is not None and "sliding-window" in reason
    assert model.cannot_answer_reason() is None
    assert L.llama_model_n_swa(model.ptr) == ARCHS[arch].sliding_window

    session = LlamaSession(model, n_ctx=N_CTX, n_threads=1)
    try:
        # The iSWA cache's state holds two caches (global layers, then window layers): epi's block codec refuses
        # it instead of reading it as one.
        tokens = text_tokens(model, 64)
        session.prefill(tokens)
        with pytest.raises(K.KVFormatError):
            K.parse_state_blob(K.capture_block(session, 0, 16, 48))

        session.clear()
        context = model.detokenize(text_tokens(model, 150))  # longer than the window: the window layers slide
        prompt = model.apply_chat_template([MESSAGES[0], {"role": "user", "content": context + "\n" +
                                                          MESSAGES[1]["content"]}])
        ids = model.tokenize(prompt, special=True)
        assert len(ids) > ARCHS[arch].sliding_window
        next_pos = session.prefill(ids)
        out = "".join(session.generate(next_pos, 6))
        assert isinstance(out, str)
        assert np.isfinite(session.last_logits()).all()
    finally:
        session.close()


@pytest.fixture(scope="module")
def gemma_270m(request, tmp_path_factory):
    """The real Gemma 3 270M, assembled once into pytest's cache folder (kept across runs) or a temporary one."""
    from gemma_270m import gemma_270m_or_skip

    cache = getattr(request.config, "cache", None)
    folder = cache.mkdir("gemma3-270m") if cache is not None else tmp_path_factory.mktemp("gemma3-270m")
    return gemma_270m_or_skip(folder)


def test_the_real_gemma3_270m_is_read_as_text_only(gemma_270m):
    """Gemma 3 270M (Q4_K_M, PyPI slices): 5 of every 6 layers see a 512-token window. A base model: its GGUF has
    no chat template, so it cannot answer; it loads, reads text and generates."""
    from episodic_cli.engine.llama.backend import LlamaModel, LlamaSession

    model = LlamaModel(gemma_270m)
    try:
        assert (model.info.architecture, model.info.n_layer) == ("gemma3", 18)
        assert L.llama_model_n_swa(model.ptr) == 512
        assert "sliding-window" in model.block_reuse_reason()
        assert "chat template" in model.cannot_answer_reason()
        session = LlamaSession(model, n_ctx=256, n_threads=1)
        try:
            ids = model.tokenize("The archive keeps every page of the book, and the key to the archive is")
            next_pos = session.prefill(ids)
            assert np.isfinite(session.last_logits()).all()
            assert isinstance("".join(session.generate(next_pos, 4)), str)
        finally:
            session.close()
    finally:
        model.close()
