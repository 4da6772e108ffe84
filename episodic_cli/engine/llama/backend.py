"""The llama.cpp backend: model loading, tokenization, the surprise pass and streaming generation.

Built on llama-cpp-python's low-level bindings, not its high-level `Llama`: we need our own context parameters
(unified KV, flash attention fixed off, logits for every token during ingest) and direct access to the logits
buffer, which the native surprise kernel reads in place.
"""
from __future__ import annotations

import codecs
import ctypes
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import llama_cpp as L
import numpy as np
from jinja2 import TemplateError

from ... import native
from ..errors import EpiError
from .chat_template import JINJA, RENDER_ERRORS, JinjaTemplate
from .chat_template import choose as choose_renderer
from .gguf import GGUFHeaderError, describe_damage, read_gguf_header

INGEST_BATCH = 512

# Position encodings whose KV cache cannot be cut into position-independent event blocks (docs/how-it-works.md,
# "The llama.cpp context"): such models answer in text mode.
_REFUSED_ROPE = {
    L.LLAMA_ROPE_TYPE_MROPE: "M-RoPE",
    L.LLAMA_ROPE_TYPE_IMROPE: "M-RoPE",
    L.LLAMA_ROPE_TYPE_VISION: "vision RoPE",
}

_log_callback = None


def quiet_llama_logs() -> None:
    """llama.cpp prints hundreds of lines per model load on stderr; keep them unless EPI_DEBUG is set."""
    global _log_callback
    if _log_callback is not None or os.environ.get("EPI_DEBUG"):
        return

    @L.llama_log_callback
    def _drop(level, text, user_data):  # pragma: no cover - called from C
        return None

    _log_callback = _drop
    L.llama_log_set(_log_callback, None)
    L.llama_backend_init()


def default_threads() -> int:
    """Physical cores are what llama.cpp scales with; os.cpu_count() counts hyperthreads, so halve big counts."""
    n = os.cpu_count() or 2
    return max(1, n if n <= 4 else n // 2)


def generation_threads() -> int:
    """Threads for one-token decodes (answers): one core fewer than for batches. A decode is hundreds of short
    ops, each ending at a barrier where every thread waits for the slowest; with a thread per core, any other busy
    process takes a core from one of them and stalls all the others at every op (bench/models/under_load.py: 2 cores and
    one competing process cut answers from ~99 to ~31 tokens/s with 2 threads; 1 thread gave ~74 idle, ~79
    loaded). Batches (ingest, prompts) have long ops and keep every core."""
    return max(1, default_threads() - 1)


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    name: str
    architecture: str
    n_layer: int
    n_head_kv: int
    n_embd: int
    n_ctx_train: int
    n_vocab: int
    n_params: int
    chat_template: str | None


class LlamaModel:
    """A loaded GGUF model (weights + vocabulary). Contexts are created from it for ingest and for answering."""

    def __init__(self, path: Path, n_gpu_layers: int = 999):
        quiet_llama_logs()
        self.path = Path(path)
        self.n_gpu_layers = n_gpu_layers
        params = L.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers  # ignored by CPU builds; offloads everything on CUDA/Metal builds
        self.ptr = L.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.ptr:
            damage = describe_damage(self.path)  # a truncated or damaged file, rather than an unknown format
            if damage:
                raise EpiError(f"cannot use model file {self.path}: {damage}; copy or download it again")
            raise EpiError(f"could not load model {self.path}: not a GGUF file llama.cpp {L.__version__} can read")
        self.vocab = L.llama_model_get_vocab(self.ptr)
        self.info = self._read_info()
        self._pieces: list[bytes] | None = None

    @cached_property
    def tensor_names(self) -> tuple[str, ...] | None:
        """The names in the file's tensor table (llama.cpp has no call for them), read once per loaded model: the
        whole header is parsed (~35 ms for the bundled model). None when the header cannot be read."""
        try:
            return read_gguf_header(self.path).tensor_names
        except (GGUFHeaderError, OSError):
            return None

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as text, or None when the model has no such key."""
        buf = ctypes.create_string_buffer(256)
        n = L.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def _read_info(self) -> ModelInfo:
        tmpl = L.llama_model_chat_template(self.ptr, None)
        name = self.meta("general.name") or self.path.stem
        return ModelInfo(
            path=self.path,
            name=name,
            architecture=self.meta("general.architecture") or "unknown",
            n_layer=L.llama_model_n_layer(self.ptr),
            n_head_kv=L.llama_model_n_head_kv(self.ptr),
            n_embd=L.llama_model_n_embd(self.ptr),
            n_ctx_train=L.llama_model_n_ctx_train(self.ptr),
            n_vocab=L.llama_vocab_n_tokens(self.vocab),
            n_params=L.llama_model_n_params(self.ptr),
            chat_template=tmpl.decode("utf-8", "replace") if tmpl else None,
        )

    def cannot_answer_reason(self) -> str | None:
        """Why this model cannot answer at all, or None: an encoder (an embedding model, T5's encoder) or a base
        model without a chat template. Everything else answers, from blocks or as text (block_reuse_reason)."""
        if L.llama_model_has_encoder(self.ptr) and not L.llama_model_has_decoder(self.ptr):
            return "it is an encoder (embedding) model, which cannot write an answer"
        if L.llama_model_has_encoder(self.ptr):
            return "it is an encoder-decoder model, which epi's contexts do not run"
        if not self.info.chat_template:
            return "its GGUF has no chat template (a base model cannot follow the question format)"
        return None

    def block_reuse_reason(self) -> str | None:
        """Why this model's KV cache cannot be cut into event blocks and loaded elsewhere, or None when it can
        (dense attention with RoPE positions). Such a model answers in text mode: it re-reads the retrieved events
        (docs/architectures.md has the measurements behind each case)."""
        if L.llama_model_is_recurrent(self.ptr) or L.llama_model_is_hybrid(self.ptr):
            return "it has a recurrent (state-space) memory, which cannot be split into event blocks"
        if L.llama_model_n_swa(self.ptr) > 0:
            return "it uses sliding-window attention on some layers, whose cache holds only the last window"
        rope = L.llama_model_rope_type(self.ptr)
        if rope in _REFUSED_ROPE:
            return f"it uses {_REFUSED_ROPE[rope]} positions, which a block cannot be moved by"
        return None

    # -- vocabulary -------------------------------------------------------------------------------------------

    def tokenize(self, text: str, special: bool = False) -> np.ndarray:
        """Token ids of `text`; `special` parses control tokens such as <|im_start|> (only for our own templates)."""
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(self.vocab, data, len(data), buf, cap, False, special)
        if n < 0:
            raise EpiError("tokenizer failed on the input text")
        return np.ctypeslib.as_array(buf)[:n].astype(np.int32)

    def pieces(self) -> list[bytes]:
        """The byte string of every vocabulary entry, built once (used for offsets and boundary detection)."""
        if self._pieces is None:
            buf = ctypes.create_string_buffer(256)
            out = []
            for tok in range(self.info.n_vocab):
                n = L.llama_token_to_piece(self.vocab, tok, buf, len(buf), 0, False)
                out.append(buf.raw[: max(n, 0)])
            self._pieces = out
        return self._pieces

    def detokenize(self, tokens) -> str:
        table = self.pieces()
        return b"".join(table[t] for t in tokens).decode("utf-8", "replace")

    def is_end_of_generation(self, token: int) -> bool:
        return bool(L.llama_vocab_is_eog(self.vocab, token))

    def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        """Render with the template stored in the GGUF: by llama.cpp where its built-in format agrees with the
        template's own Jinja, else by the Jinja (chat_template.py)."""
        if self.template_renderer == JINJA:
            try:
                return self._jinja.render(messages)
            except RENDER_ERRORS as exc:
                raise EpiError(f"the chat template of {self.path.name} cannot render this conversation ({exc})") \
                    from None
        rendered = self._builtin_template(messages)
        if rendered is None:
            raise EpiError(f"llama.cpp does not recognise the chat template of {self.path.name}")
        return rendered

    @cached_property
    def _jinja(self) -> JinjaTemplate | None:
        if not self.info.chat_template:
            return None
        try:
            return JinjaTemplate(self.info.chat_template, self._token_text(L.llama_vocab_bos(self.vocab)),
                                 self._token_text(L.llama_vocab_eos(self.vocab)))
        except TemplateError:
            return None

    @cached_property
    def template_renderer(self) -> str:
        """JINJA or LLAMA_CPP: which renders this model's prompts (chat_template.choose)."""
        return choose_renderer(self._jinja, self._builtin_template)

    def _token_text(self, token: int) -> str:
        return self.pieces()[token].decode("utf-8", "replace") if 0 <= token < self.info.n_vocab else ""

    def _builtin_template(self, messages: list[dict[str, str]]) -> str | None:
        """llama.cpp's rendering of the GGUF's template (None where it recognises no format it knows)."""
        arr = (L.llama_chat_message * len(messages))()
        keep = []
        for i, m in enumerate(messages):
            role, content = m["role"].encode(), m["content"].encode()
            keep += [role, content]
            arr[i].role, arr[i].content = role, content
        tmpl = self.info.chat_template.encode() if self.info.chat_template else None
        size = sum(len(k) for k in keep) * 2 + 1024
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = L.llama_chat_apply_template(tmpl, arr, len(messages), True, buf, size)
            if n < 0:
                return None
            if n <= size:
                return buf.raw[:n].decode("utf-8", "replace")
            size = n + 1
        raise EpiError("chat template rendering failed")

    def close(self) -> None:
        if getattr(self, "ptr", None):
            L.llama_model_free(self.ptr)
            self.ptr = None

    def __del__(self):  # pragma: no cover - interpreter shutdown order varies
        try:
            self.close()
        except Exception:
            pass


@dataclass(frozen=True)
class WindowState:
    """Where the ingest pass stands between two batches (what a checkpoint must restore besides the cells)."""

    next_token: int   # first document token of the next batch
    cached: int       # cells in sequence 0 (== the next position)
    offset: int       # document token t sits at cache position len(sink) + t - offset
    keep_from: int    # first document token the window must not evict (an undecided event's start)


class LlamaSession:
    """One llama.cpp context on a model: unified KV cache, F16 K/V, flash attention off unless asked for (the
    layered answerer's; stored blocks take a context's V layout when loaded: kv/blocks.py, session_v_trans), and a
    reusable token batch."""

    def __init__(self, model: LlamaModel, n_ctx: int, n_threads: int | None = None, n_seq_max: int = 2,
                 eval_callback=None, eval_user_data: int | None = None, flash_attn: bool = False):
        """`eval_callback`: a ggml_backend_sched_eval_callback watching the graph's nodes, with `eval_user_data` (an
        address) as its user data (query_capture.py); the caller keeps both alive as long as the session.
        `flash_attn`: only for contexts whose blocks are assembled with V untransposed (the layered answerer's; its
        hidden cells then cost nothing)."""
        self.model = model
        self.n_ctx = n_ctx
        self.n_seq_max = n_seq_max
        params = L.llama_context_default_params()
        if eval_callback is not None:
            params.cb_eval = eval_callback
            params.cb_eval_user_data = eval_user_data
        params.n_ctx = n_ctx
        params.n_batch = INGEST_BATCH
        params.n_ubatch = INGEST_BATCH
        params.n_seq_max = n_seq_max
        params.n_threads = n_threads or generation_threads()  # --threads sets both
        params.n_threads_batch = n_threads or default_threads()
        params.kv_unified = True
        self.flash_attn = flash_attn
        params.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.type_k = L.GGML_TYPE_F16
        params.type_v = L.GGML_TYPE_F16
        self.ctx = L.llama_init_from_model(model.ptr, params)
        if not self.ctx:
            raise EpiError(f"llama.cpp could not create a {n_ctx}-token context (out of memory?)")
        self.memory = L.llama_get_memory(self.ctx)
        self.batch = L.llama_batch_init(INGEST_BATCH, 0, 1)
        self._tok = np.ctypeslib.as_array(self.batch.token, shape=(INGEST_BATCH,))
        self._pos = np.ctypeslib.as_array(self.batch.pos, shape=(INGEST_BATCH,))
        self._nseq = np.ctypeslib.as_array(self.batch.n_seq_id, shape=(INGEST_BATCH,))
        self._want = np.ctypeslib.as_array(self.batch.logits, shape=(INGEST_BATCH,))
        self._seq_of_slot = [-1] * INGEST_BATCH
        self._sink: np.ndarray | None = None  # surprise_pass: the sink tokens the cache starts with
        self._sink_len = 0
        self._sink_logits: np.ndarray | None = None

    # -- decoding ---------------------------------------------------------------------------------------------

    def decode(self, tokens: np.ndarray, pos0: int, outputs: np.ndarray | None = None, seq: int = 0) -> None:
        """Decode up to INGEST_BATCH tokens at positions pos0.. in sequence `seq`. `outputs` marks the rows whose
        logits are wanted (default: the last one only)."""
        n = len(tokens)
        assert 0 < n <= INGEST_BATCH
        if outputs is None:
            outputs = np.zeros(n, dtype=np.int8)
            outputs[n - 1] = 1
        self._decode_batch(tokens, np.arange(pos0, pos0 + n, dtype=np.int32), [seq] * n, outputs)

    def _decode_batch(self, tokens: np.ndarray, positions: np.ndarray, seqs: list[int], outputs: np.ndarray) -> None:
        n = len(tokens)
        b = self.batch
        b.n_tokens = n
        self._tok[:n] = tokens
        self._pos[:n] = positions
        self._nseq[:n] = 1
        for i, seq in enumerate(seqs):
            if self._seq_of_slot[i] != seq:
                b.seq_id[i][0] = seq
                self._seq_of_slot[i] = seq
        self._want[:n] = outputs
        rc = L.llama_decode(self.ctx, b)
        if rc != 0:
            raise EpiError(f"llama.cpp decode failed (code {rc}); the context of {self.n_ctx} tokens may be full")

    def branch_surprise(self, pos: int, branches: list[np.ndarray]) -> list[np.ndarray]:
        """-log p of each token of each branch as the continuation of sequence 0, whose cells end at `pos` and
        whose last logits are current. All branches are decoded in one batch, branch j in sequence j + 1 holding
        a copy of sequence 0 (metadata only in the unified cache: no cell is copied), and removed afterwards.
        Sequence 0's last logits are overwritten: decode in it next."""
        assert branches and len(branches) < self.n_seq_max and all(len(b) for b in branches)
        n_vocab = self.model.info.n_vocab
        head = self.last_logits()[None, :]
        first = native.surprise(np.repeat(head, len(branches), axis=0),
                                np.array([b[0] for b in branches], dtype=np.int32))
        tokens = np.concatenate(branches).astype(np.int32)
        assert len(tokens) <= INGEST_BATCH
        positions = np.concatenate([np.arange(pos, pos + len(b), dtype=np.int32) for b in branches])
        seqs = [j + 1 for j, b in enumerate(branches) for _ in b]
        for j in range(len(branches)):
            L.llama_memory_seq_cp(self.memory, 0, j + 1, -1, -1)
        try:
            self._decode_batch(tokens, positions, seqs, np.ones(len(tokens), dtype=np.int8))
            # row i's logits predict the token after tokens[i] in its branch; a branch's last row predicts nothing
            targets = np.concatenate([np.append(b[1:], 0) for b in branches]).astype(np.int32)
            rest = native.surprise_at(self.logits_address(), len(tokens), n_vocab, targets)
        finally:
            for j in range(len(branches)):
                L.llama_memory_seq_rm(self.memory, j + 1, -1, -1)
        out, at = [], 0
        for j, b in enumerate(branches):
            out.append(np.concatenate([[first[j]], rest[at : at + len(b) - 1]]).astype(np.float32))
            at += len(b)
        return out

    def warm_up(self) -> None:
        """Touch the weights once (the first decode of a process pages in the mapped model file), so that the
        first question is timed like every later one."""
        self.decode(np.array([0], dtype=np.int32), 0)
        self.clear()

    def logits_address(self) -> int:
        return ctypes.cast(L.llama_get_logits(self.ctx), ctypes.c_void_p).value

    def last_logits(self) -> np.ndarray:
        """A view (no copy) of the logits of the last output row of the latest decode."""
        ptr = L.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.model.info.n_vocab,))

    def clear(self) -> None:
        L.llama_memory_clear(self.memory, True)
        self._sink = None  # surprise_pass decodes its sink again

    def keep_first(self, n: int) -> None:
        """Forget the cache from position `n` on; the first `n` positions stay as decoded (a shared prompt prefix)."""
        L.llama_memory_seq_rm(self.memory, -1, n, -1)

    # -- the ingest pass --------------------------------------------------------------------------------------

    def surprise_pass(
        self,
        tokens: np.ndarray,
        sink: np.ndarray,
        local: int,
        on_progress: Callable[[int], None] | None = None,
        on_decoded: Callable[[np.ndarray, int], int] | None = None,
        on_batch: Callable[[WindowState], None] | None = None,
        resume: tuple[WindowState, bytes] | None = None,
        surprise: np.ndarray | None = None,
        measure_at: np.ndarray | None = None,
    ) -> np.ndarray:
        """One pass over a document after the `sink` tokens, with a sliding window that keeps the sink in place
        (attention sinks, EM-LLM 3.1 / StreamingLLM), returning each token's surprise -log p(x_t | x_<t) (EM-LLM
        eq. 1). The sink is the answer prompt's fixed prefix, so every block is computed after the very tokens it
        follows when an answer loads it; it is decoded once per session and kept across documents.

        Before each batch the window is cut back to the sink plus the `local` most recent tokens, so every token
        sees at least `local` (at most `local` + a batch) preceding tokens besides the sink. Attention costs in
        proportion to the cells up to the highest one in use, so the context is sized to what the window keeps
        (ingest.ingest_context). Tokens an undecided event still needs are never evicted.

        After each batch, `on_decoded(surprise, known)` may act on the cache (capture event blocks: document token t
        sits at cache position `cache_pos(t)`); surprise[:known] is final and tokens < known - 1 are decoded. It
        returns the first document token that must stay in the cache; the window never evicts from there on.

        Checkpoints: between batches (not after the last), `on_batch(state)` may save the window (`window_blob()`)
        with `state`; `resume=(state, blob)` restores them and goes on from `state.next_token`, with `surprise`
        (the caller's array) holding the values the caller still needs before it.

        `measure_at` (a boolean mark per token, e.g. the clean cuts) asks llama.cpp for logits only on the rows that
        predict a marked token; the others get NaN. The cells, and so the kept blocks, are the same either way."""
        n = len(tokens)
        surprise = np.zeros(n, dtype=np.float32) if surprise is None else surprise
        n_vocab = self.model.info.n_vocab
        if resume is None:
            self._hold_sink(sink)
            self._offset = 0  # document token t sits at cache position len(sink) + t - offset (positions stay compact)
            if n == 0:
                return surprise
            surprise[0] = native.surprise(self._sink_logits[None, :], tokens[:1])[0]  # the sink predicts token 0
            start, keep_from, cached = 0, 0, self._sink_len  # cached: cells in the cache == next position
        else:
            state, blob = resume
            self._restore_window(sink, blob)
            self._offset = state.offset
            start, keep_from, cached = state.next_token, state.keep_from, state.cached
        for a in range(start, n, INGEST_BATCH):
            b = min(a + INGEST_BATCH, n)
            cached = self._slide_window(cached, b - a, keep_from, local)
            # Row i predicts token a+i+1; the document's last token predicts nothing.
            n_out = min(b, n - 1) - a
            wanted = np.zeros(b - a, dtype=np.int8)
            wanted[:n_out] = 1 if measure_at is None else measure_at[a + 1 : a + 1 + n_out]
            rows = np.flatnonzero(wanted)
            if len(rows) == 0:
                wanted[b - a - 1] = 1  # llama.cpp wants at least one output row; this one is not read
            self.decode(tokens[a:b], cached, wanted)
            cached += b - a
            if n_out > 0:
                values = native.surprise_at(self.logits_address(), len(rows), n_vocab, tokens[a + 1 + rows])
                if len(rows) == n_out:
                    surprise[a + 1 : a + 1 + n_out] = values
                else:
                    measured = np.full(n_out, np.nan, dtype=np.float32)
                    measured[rows] = values
                    surprise[a + 1 : a + 1 + n_out] = measured
            if on_decoded:
                keep_from = on_decoded(surprise, b + 1 if b < n else n)
            if on_progress:
                on_progress(b - a)
            if on_batch and b < n:
                # The cells the next batch's slide evicts go now, so a checkpoint's window holds only what the pass
                # still reads (sink + local or the undecided event): 701 cells measured where it held 1,214.
                self._evict_ahead(cached, min(INGEST_BATCH, n - b), keep_from, local)
                on_batch(WindowState(next_token=b, cached=cached, offset=self._offset, keep_from=keep_from))
        return surprise

    def window_blob(self) -> bytes:
        """llama.cpp's state of sequence 0 (the sink and the window, K, V and positions) between two batches."""
        n = L.llama_state_seq_get_size(self.ctx, 0)
        buf = (ctypes.c_uint8 * n)()
        got = L.llama_state_seq_get_data(self.ctx, buf, n, 0)
        if got != n:
            raise EpiError(f"llama.cpp could not read the ingest window ({got} of {n} bytes)")
        return bytes(buf)

    def _restore_window(self, sink: np.ndarray, blob: bytes) -> None:
        """The cache as a checkpoint left it: the same cells at the same positions (sink included)."""
        self.clear()
        data = (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)
        if L.llama_state_seq_set_data(self.ctx, data, len(blob), 0) != len(blob):
            self.clear()
            raise EpiError("the saved ingest window does not fit this model or context; the document starts over")
        # The sink's cells are back but not its logits (only token 0 needs them): the next document decodes it anew.
        self._sink, self._sink_len = None, len(sink)

    def _hold_sink(self, sink: np.ndarray) -> None:
        """Leave only the sink's cells in the cache: decoded once, then kept while documents come and go."""
        if self._sink is not None and np.array_equal(self._sink, sink):
            L.llama_memory_seq_rm(self.memory, -1, self._sink_len, -1)  # every sequence: staging leftovers too
            return
        if not 0 < len(sink) <= self.n_ctx // 4:
            raise EpiError(f"the ingest sink must hold 1..{self.n_ctx // 4} tokens, not {len(sink)}")
        self.clear()
        self.prefill(np.asarray(sink, dtype=np.int32))
        self._sink_logits = self.last_logits().copy()
        self._sink, self._sink_len = np.array(sink, dtype=np.int32), len(sink)

    def cache_pos(self, t: int) -> int:
        """Cache position of document token t during `surprise_pass` (valid while t has not been evicted)."""
        return self._sink_len + t - self._offset

    def _discard(self, cached: int, incoming: int, keep_from: int, local: int) -> tuple[int, int]:
        """(cells the slide before `incoming` tokens evicts, cells it may evict) after the sink."""
        first = self._sink_len
        needed = cached + incoming - self.n_ctx
        evictable = max(self.cache_pos(keep_from) - first, 0)
        return max(needed, min(cached - first - local, evictable)), evictable

    def _evict_ahead(self, cached: int, incoming: int, keep_from: int, local: int) -> None:
        """Remove now the cells the slide before the next batch will evict, leaving positions as they are: that
        slide then only closes the gap, exactly as it would have, and a window saved meanwhile is that much
        smaller. (Only removal: a position shift here would be pending, not in the saved cells, at a checkpoint.)"""
        discard, evictable = self._discard(cached, incoming, keep_from, local)
        if 0 < discard <= evictable:
            L.llama_memory_seq_rm(self.memory, 0, self._sink_len, self._sink_len + discard)

    def _slide_window(self, cached: int, incoming: int, keep_from: int, local: int) -> int:
        """Evict the oldest document tokens down to `local` of them (never a token the caller still needs, and at
        least what the incoming batch needs to fit) and close the position gap (llama.cpp re-rotates K)."""
        first = self._sink_len
        discard, evictable = self._discard(cached, incoming, keep_from, local)
        if discard > evictable:
            raise EpiError("ingest window too small for the pending event; lower --max-tokens")
        if discard <= 0:
            return cached
        L.llama_memory_seq_rm(self.memory, 0, first, first + discard)
        L.llama_memory_seq_add(self.memory, 0, first + discard, cached, -discard)
        self._offset += discard
        return cached - discard

    # -- generation -------------------------------------------------------------------------------------------

    def prefill(self, tokens: np.ndarray, pos0: int = 0) -> int:
        """Decode a prompt in batches; returns the next position. Logits of its last token are ready afterwards."""
        for a in range(0, len(tokens), INGEST_BATCH):
            self.decode(tokens[a : a + INGEST_BATCH], pos0 + a)
        return pos0 + len(tokens)

    def generate(self, next_pos: int, max_tokens: int, should_stop: Callable[[], bool] | None = None) -> Iterator[str]:
        """Greedy decoding from the current cache, yielding text as soon as it forms whole UTF-8 characters.
        A mild repetition penalty keeps small models out of loops without changing what they copy from context."""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        pieces = self.model.pieces()
        recent: list[int] = []
        for _ in range(max_tokens):
            if next_pos >= self.n_ctx:
                break
            logits = self.last_logits().copy()
            if recent:
                ids = np.fromiter(set(recent[-64:]), dtype=np.int64)
                vals = logits[ids]
                logits[ids] = np.where(vals > 0, vals / 1.1, vals * 1.1)
            token = int(np.argmax(logits))
            if self.model.is_end_of_generation(token):
                break
            text = decoder.decode(pieces[token])
            if text:
                yield text
            if should_stop and should_stop():
                break
            recent.append(token)
            self.decode(np.array([token], dtype=np.int32), next_pos)
            next_pos += 1
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail

    def close(self) -> None:
        if getattr(self, "ctx", None):
            L.llama_batch_free(self.batch)
            L.llama_free(self.ctx)
            self.ctx = None

    def __del__(self):  # pragma: no cover
        try:
            self.close()
        except Exception:
            pass


def llama_cpp_version() -> str:
    return L.__version__


def gpu_offload_supported() -> bool:
    return bool(L.llama_supports_gpu_offload())


def system_info() -> str:
    return L.llama_print_system_info().decode("utf-8", "replace").strip()
