"""A bare llama.cpp context for the tests of epi's llama.cpp patches: set up as epi's answer sessions are (unified
KV cache, F16 K/V), flash attention chosen by the test, decoding sequence 0 and returning logits."""
from __future__ import annotations

import numpy as np
from llama_cpp import llama_cpp as L

from episodic_cli.engine.llama.backend import default_threads


class RawContext:
    def __init__(self, model, flash_attn: bool, n_ctx: int = 256, n_batch: int = 256, n_seq_max: int = 4):
        params = L.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = n_seq_max
        params.n_threads = params.n_threads_batch = default_threads()
        params.kv_unified = True
        params.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.type_k = params.type_v = L.GGML_TYPE_F16
        self.n_vocab = model.info.n_vocab
        self.ctx = L.llama_init_from_model(model.ptr, params)
        assert self.ctx, "llama.cpp could not create the test context"
        self.memory = L.llama_get_memory(self.ctx)
        self.batch = L.llama_batch_init(n_batch, 0, 1)

    def decode(self, tokens: np.ndarray, pos0: int, last_only: bool = False) -> np.ndarray:
        """Decode `tokens` in one batch at positions pos0.. of sequence 0: the logits of every token, [n, n_vocab]
        (of the last one only, [1, n_vocab], with `last_only`)."""
        b, n = self.batch, len(tokens)
        b.n_tokens = n
        for i, tok in enumerate(tokens):
            b.token[i], b.pos[i], b.n_seq_id[i] = int(tok), pos0 + i, 1
            b.logits[i] = int(not last_only or i == n - 1)
            b.seq_id[i][0] = 0
        assert L.llama_decode(self.ctx, b) == 0
        rows = 1 if last_only else n
        return np.ctypeslib.as_array(L.llama_get_logits(self.ctx), shape=(rows, self.n_vocab)).copy()

    def close(self) -> None:
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
