"""What a GGUF model is and what it costs, read from its header alone: no weights loaded, no llama.cpp.

`epi models` describes every model it finds with these facts, and `epi ingest` plans around them (a model whose KV
cannot be cut into event blocks answers in text mode). The load-time check is LlamaModel.block_reuse_reason; the
architecture lists here mirror llama.cpp's own (src/llama-arch.cpp of the pinned llama-cpp-python), so that a model
is judged the same before and after loading.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .gguf import GGUFHeaderError, GGUFMetadata, read_gguf_metadata

BLOCKS, TEXT, NONE = "blocks", "text", "none"

# llm_arch_is_recurrent / llm_arch_is_hybrid in llama.cpp: their memory is a running state, not per-token KV.
RECURRENT_ARCHS = frozenset({
    "mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", "jamba", "falcon-h1", "plamo2", "granitehybrid",
    "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe", "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3",
    "glm5-next", "qwen35", "qwen35moe", "qwen4exp", "minimax-01"})
# Encoders write no answer: embedding models, and T5's encoder half.
ENCODER_ARCHS = frozenset({"bert", "nomic-bert", "nomic-bert-moe", "neo-bert", "jina-bert-v2", "jina-bert-v3",
                           "modern-bert", "eurobert", "t5encoder", "gemma-embedding"})
ENCODER_DECODER_ARCHS = frozenset({"t5"})
# Multimodal RoPE (positions in several sections): a block cannot be moved by one position offset.
MROPE_ARCHS = frozenset({"qwen2vl", "qwen3vl", "qwen3vlmoe"})
# Phi-3's GGUFs carry a window that llama.cpp ignores (it runs them with dense attention: src/models/phi3.cpp).
WINDOW_IGNORED_ARCHS = frozenset({"phi3"})

# general.file_type (llama_ftype) names, as llama.cpp's quantizer calls them.
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
              11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
              18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S",
              25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M",
              32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4"}

# Bytes a stored K or V value takes in each of epi's block kinds (ggml's q8_0: 34 bytes per 32 values; q4_0: 18).
BYTES_PER_VALUE = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}

# What answering takes beyond the weights, as llama.cpp on the CPU takes it; fitted on four model sizes' peak RSS
# (docs/benchmarks.md, "Model size: blocks against re-reading").
ANSWER_CONTEXT_TOKENS = 8192  # budgets.ANSWER_CONTEXT: its f16 KV cache is cleared (so touched) whole at creation
BATCH_TOKENS = 512            # a prefill batch: its activations, and its attention scores over READ_TOKENS
READ_TOKENS = 3072            # budgets.EVIDENCE_BUDGET: the sources a question reads
PROCESS_BYTES = 100_000_000   # the rest: Python, numpy, the embedder, llama.cpp's output buffers (fitted, as above)
EXPAND_TO_F16_MAX_BYTES = 700_000_000  # small quantized models run expanded to F16 (models.py; about 1B params)
_FLOAT_FILE_TYPES = (0, 1, 32)  # F32, F16, BF16: nothing to expand


def expands_to_f16(file_bytes: int, file_type: int | None) -> bool:
    """Whether epi runs this model expanded to F16: quantized and small (docs/benchmarks.md: F16 prefills faster on
    the CPU and holds small models' quantized weights exactly)."""
    return file_bytes < EXPAND_TO_F16_MAX_BYTES and file_type not in _FLOAT_FILE_TYPES


class ModelFileError(ValueError):
    """A file that is not a usable GGUF; the message is one clause ("its header is damaged (...)")."""


@dataclass(frozen=True)
class ModelFacts:
    path: Path
    name: str
    architecture: str
    n_params: int
    quantization: str
    file_bytes: int
    context_length: int
    has_chat_template: bool
    n_layer: int
    n_embd: int
    n_vocab: int
    n_ff: int
    kv_values_per_token: int  # K and V values one token keeps, summed over the layers
    n_head: int
    runs_as_f16: bool         # epi expands it to F16 first (expands_to_f16)
    repacked_bytes: int       # weights the CPU backend keeps a repacked copy of (gguf.REPACKED_TYPES)
    sliding_window: int       # 0: dense attention on every layer
    serving: str              # BLOCKS, TEXT or NONE
    why: str | None           # why not BLOCKS

    def kv_bytes_per_token(self, kind: str = "q8_0") -> int:
        """Bytes a token's K and V take in a stored block of `kind` (f16, q8_0, q4_0)."""
        return round(self.kv_values_per_token * BYTES_PER_VALUE[kind])

    def memory_needed(self, n_ctx: int | None = None, gpu: bool = False) -> int:
        """Bytes of memory answering with this model takes on the CPU (`gpu`: the weights and cache in the GPU's
        memory instead): its weights as llama.cpp holds them (the mapped file, or its F16 form, and the repacked
        copies), the answer context's f16 KV cache, one batch's working memory and epi's own process."""
        n_ctx = n_ctx or min(ANSWER_CONTEXT_TOKENS, self.context_length or ANSWER_CONTEXT_TOKENS)
        batch = BATCH_TOKENS * 4 * (4 * self.n_embd + 2 * self.n_ff + self.n_head * READ_TOKENS)
        if gpu:
            return batch + PROCESS_BYTES
        weights = 2 * self.n_params if self.runs_as_f16 else self.file_bytes + self.repacked_bytes
        return weights + n_ctx * self.kv_values_per_token * 2 + batch + PROCESS_BYTES

    @property
    def size_label(self) -> str:
        n = self.n_params
        return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _int(value, default: int = 0) -> int:
    """A metadata number; a per-layer list gives its largest entry."""
    if isinstance(value, list):
        return max((int(v) for v in value), default=default)
    return int(value) if isinstance(value, (int, float)) else default


def _kv_values_per_token(meta: GGUFMetadata, arch: str, n_layer: int, n_embd: int) -> int:
    n_head = meta.get(f"{arch}.attention.head_count", 0)
    n_head_kv = meta.get(f"{arch}.attention.head_count_kv", n_head)
    head = max(_int(n_head), 1)
    key_length = _int(meta.get(f"{arch}.attention.key_length"), n_embd // head)
    value_length = _int(meta.get(f"{arch}.attention.value_length"), key_length)
    per_layer = n_head_kv if isinstance(n_head_kv, list) else [n_head_kv] * n_layer
    return sum(int(h) * (key_length + value_length) for h in per_layer[:n_layer])


def _serving(meta: GGUFMetadata, arch: str, window: int) -> tuple[str, str | None]:
    """How epi serves the model, and why not with blocks (LlamaModel's load-time checks, from metadata)."""
    if arch in ENCODER_ARCHS:
        return NONE, "an encoder (embedding) model writes no answers"
    if arch in ENCODER_DECODER_ARCHS:
        return NONE, "an encoder-decoder model, which epi's contexts do not run"
    if not meta.get("tokenizer.chat_template"):
        return NONE, "no chat template in its GGUF (a base model cannot follow the question format)"
    if arch in RECURRENT_ARCHS:
        return TEXT, "a recurrent (state-space) memory cannot be split into event blocks"
    if window > 0:
        return TEXT, "sliding-window attention on some layers keeps only the last window"
    if arch in MROPE_ARCHS:
        return TEXT, "M-RoPE positions cannot be moved by one offset"
    return BLOCKS, None


def read_model_facts(path: Path) -> ModelFacts:
    """Facts of the GGUF at `path`; ModelFileError when it is not one that holds together."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelFileError(f"it cannot be read ({exc.strerror or exc})") from None
    if magic != b"GGUF":
        raise ModelFileError("it is not a GGUF file (llama.cpp models start with the bytes GGUF)")
    try:
        meta = read_gguf_metadata(path)
    except GGUFHeaderError as exc:
        raise ModelFileError(f"its header is damaged ({exc})") from None
    except OSError as exc:
        raise ModelFileError(f"it cannot be read ({exc.strerror or exc})") from None
    if meta.header.truncated:
        raise ModelFileError(f"it is truncated: its header describes {meta.header.data_bytes_needed / 1e6:,.1f} MB "
                             f"but the file holds {meta.header.file_bytes / 1e6:,.1f} MB")
    arch = str(meta.get("general.architecture", "unknown"))
    n_layer = _int(meta.get(f"{arch}.block_count"))
    n_embd = _int(meta.get(f"{arch}.embedding_length"))
    window = 0 if arch in WINDOW_IGNORED_ARCHS else _int(meta.get(f"{arch}.attention.sliding_window"))
    tokens = meta.get("tokenizer.ggml.tokens")
    n_vocab = _int(meta.get(f"{arch}.vocab_size"), getattr(tokens, "length", 0))
    serving, why = _serving(meta, arch, window)
    file_type = meta.header.file_type
    return ModelFacts(
        path=path, name=str(meta.get("general.name") or path.stem), architecture=arch,
        n_params=meta.header.n_params,
        quantization=FILE_TYPES.get(file_type, f"type {file_type}") if file_type is not None else "unknown",
        file_bytes=meta.header.file_bytes, context_length=_int(meta.get(f"{arch}.context_length")),
        has_chat_template=bool(meta.get("tokenizer.chat_template")), n_layer=n_layer, n_embd=n_embd,
        n_vocab=n_vocab, n_ff=_int(meta.get(f"{arch}.feed_forward_length")),
        kv_values_per_token=_kv_values_per_token(meta, arch, n_layer, n_embd),
        n_head=_int(meta.get(f"{arch}.attention.head_count")),
        runs_as_f16=expands_to_f16(meta.header.file_bytes, file_type), repacked_bytes=meta.header.repacked_bytes,
        sliding_window=window, serving=serving, why=why)


def machine_memory() -> int:
    """Bytes of physical memory (0 where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0
