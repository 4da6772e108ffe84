"""A tiny random-weight GGUF chat model with its own vocabulary, written with numpy + struct (no `gguf` package).

The bundled SmolLM2-135M-Instruct has a 49,152-token GPT-2-style BPE vocabulary; this model has a SentencePiece-style
one (`tokenizer.ggml.model = "llama"`) of a few hundred entries: <unk>, <s>, </s>, the ChatML control tokens
<|im_start|> and <|im_end|> (eos), the 256 byte-fallback tokens <0x00>..<0xFF> (so any UTF-8 text tokenizes) and word
pieces ("▁the", "▁a", letters, digits...). It exists so tests can check that an archive built with one model can be
answered by a model with another tokenizer. Its output is gibberish.

Shape (llama architecture, dense attention, plain RoPE, no sliding window): 2 layers, n_embd 128, 4 query heads of 32,
2 KV heads (K/V rows of 64 values, a multiple of 32 as epi's q8_0/q4_0 KV blocks need), FFN 256, trained context
4096, tied embeddings, F16 matrices and F32 norms; the file is well under 1 MB and takes milliseconds to write.

GGUF v3 layout (ggml docs/gguf.md), little-endian: magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv | n_kv x
(string key | u32 type | value) | n_tensors x (string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset)
| padding to `general.alignment` | tensor data, each tensor at its offset (a multiple of the alignment). A string is
u64 length + UTF-8 bytes; an array is u32 element type + u64 count + elements. ne[0] is the innermost (contiguous)
dimension, so a numpy array of shape (a, b) is written as ne = [b, a].

Other architectures (`arch=`, `ARCHS`): the same vocabulary, sizes and writer in the tensor layout and metadata
llama.cpp's loader requires for each (vendored in llama-cpp-python 0.3.36: src/models/<arch>.cpp, load_arch_hparams
and load_arch_tensors; names in src/llama-arch.cpp), each with its own chat-template format and control tokens:

    qwen2    Q/K/V biases, NEOX RoPE, ChatML
    qwen3    per-head RMS norms on Q and K (attn_q_norm, attn_k_norm), NEOX RoPE, ChatML (Qwen3's, with <think>)
    gemma3   sliding-window attention (`gemma3.attention.sliding_window`, `sliding_window_pattern` 2: layer 0 local,
             layer 1 global; its own RoPE base on the window layers), Q/K norms, post-attention and post-FFN norms,
             GELU FFN, embeddings scaled by sqrt(n_embd); Gemma's <start_of_turn>/<end_of_turn> turns, eos <end_of_turn>
    phi3     one fused attn_qkv matrix and one fused ffn_up (gate and up stacked, 2 x n_ff rows), NEOX RoPE, Phi-3's
             <|user|>/<|assistant|>/<|end|> turns, eos <|end|>
    granite  the llama layout with Granite's four scales (embedding, residual, attention, logit; the logit scale
             is required), Granite 3's <|start_of_role|>...<|end_of_role|> turns, eos <|end_of_text|>
    olmo2    no pre-norms: post-attention and post-FFN norms, Q/K norms over the whole projection, an untied output
             matrix, NEOX RoPE, OLMo 2's <|user|>/<|assistant|> turns, eos <|endoftext|>

Every one keeps n_head_kv * head_dim = 64 (a multiple of 32); the chat template and eos are GGUF metadata
(`tokenizer.chat_template`, `tokenizer.ggml.eos_token_id`), read back through llama.cpp like a real model's.
Random weights: the logits are for checks, not answers.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

N_LAYER = 2
N_EMBD = 128
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = N_EMBD // N_HEAD
N_FF = 256
N_CTX_TRAIN = 4096
ALIGNMENT = 32

# token types (gguf-py constants.TokenType)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# GGUF metadata value types
_U8, _I8, _U16, _I16, _U32, _I32, _F32, _BOOL, _STR, _ARR, _U64, _I64, _F64 = range(13)
# ggml tensor types
_GGML_F32, _GGML_F16 = 0, 1

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Shortened from each family's published template, keeping the markers llama.cpp's built-in renderer recognises
# the format by (src/llama-chat.cpp, llm_chat_detect_template): epi renders prompts with llama_chat_apply_template.
QWEN3_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and '</think>' in message.content %}"
    "{%- set content = message.content.split('</think>')[-1].lstrip('\n') %}"
    "{%- else %}{%- set content = message.content %}{%- endif %}"
    "{{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}"
    "{%- endif %}"
)
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') + message['content'] | trim "
    "+ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)
PHI3_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' and message['content'] %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)
GRANITE_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + '<|end_of_text|>\n' }}"
    "{%- if loop.last and add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}{%- endif %}"
    "{%- endfor %}"
)
OLMO2_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ '<|system|>\n' + message['content'] + '\n' }}"
    "{% elif message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + '\n' }}"
    "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\n' + message['content'] + eos_token + '\n' }}"
    "{% endif %}{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}{% endfor %}"
)


@dataclass(frozen=True)
class TinyArch:
    """What a tiny model of one architecture carries besides its tensors: its turn tokens and template."""

    name: str
    turn_tokens: tuple[str, ...]   # control tokens after <unk>, <s>, </s> (the template's; eos among them)
    eos: str                       # tokenizer.ggml.eos_token_id names this one
    chat_template: str
    generation_prompt: str         # what the template appends for add_generation_prompt
    turn_start: str                # a control token that does not end generation
    neox: bool                     # llama.cpp's rope type for the architecture (NEOX, else NORM)
    sliding_window: int = 0        # tokens a window layer sees (gemma3), 0: every layer dense


ARCHS: dict[str, TinyArch] = {
    "llama": TinyArch("llama", ("<|im_start|>", "<|im_end|>"), "<|im_end|>", CHATML_TEMPLATE,
                      "<|im_start|>assistant\n", "<|im_start|>", neox=False),
    "qwen2": TinyArch("qwen2", ("<|im_start|>", "<|im_end|>"), "<|im_end|>", CHATML_TEMPLATE,
                      "<|im_start|>assistant\n", "<|im_start|>", neox=True),
    "qwen3": TinyArch("qwen3", ("<|im_start|>", "<|im_end|>"), "<|im_end|>", QWEN3_TEMPLATE,
                      "<|im_start|>assistant\n<think>\n\n</think>\n\n", "<|im_start|>", neox=True),  # no thinking
    "gemma3": TinyArch("gemma3", ("<start_of_turn>", "<end_of_turn>"), "<end_of_turn>", GEMMA_TEMPLATE,
                       "<start_of_turn>model\n", "<start_of_turn>", neox=True, sliding_window=32),
    "phi3": TinyArch("phi3", ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>"), "<|end|>", PHI3_TEMPLATE,
                     "<|assistant|>\n", "<|assistant|>", neox=True),
    "granite": TinyArch("granite", ("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>"), "<|end_of_text|>",
                        GRANITE_TEMPLATE, "<|start_of_role|>assistant<|end_of_role|>", "<|start_of_role|>",
                        neox=False),
    "olmo2": TinyArch("olmo2", ("<|system|>", "<|user|>", "<|assistant|>", "<|endoftext|>"), "<|endoftext|>",
                      OLMO2_TEMPLATE, "<|assistant|>\n", "<|assistant|>", neox=True),
}
SWA_PATTERN = 2  # gemma3: every 2nd layer global (Gemma 3 has 5 window layers to 1 global; 2 layers here)

# Word pieces (SentencePiece marks a preceding space with U+2581 "▁"). Every prefix of every word is in the
# vocabulary too, because llama.cpp's SPM tokenizer only merges adjacent symbols into pieces that exist.
_WORDS = (
    "the of and to a in is it you that he was for on are as with his they I at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up other "
    "about out many then them these so some her would make like him into time has look two more write go see "
    "number no way could people my than first water been call who oil its now find long down day did get come made "
    "may part question answer archive book page chapter key event model token hello world where why"
).split()
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'\"()-"
_SPECIALS = ("<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>")
UNK_ID, BOS_ID, SPM_EOS_ID, IM_START_ID, IM_END_ID = range(5)  # eos is <|im_end|>, not </s>


def vocabulary(specials: tuple[str, ...] = _SPECIALS) -> tuple[list[str], list[float], list[int]]:
    """(pieces, scores, token types): specials (<unk> first, the rest control tokens), byte fallback, then word pieces
    ordered by score (best first)."""
    tokens = list(specials)
    types = [UNKNOWN] + [CONTROL] * (len(specials) - 1)
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [BYTE] * 256
    pieces: list[str] = ["▁"]
    seen = set(pieces)

    def add(p: str) -> None:
        if p not in seen:
            seen.add(p)
            pieces.append(p)

    for ch in _LETTERS:
        add(ch)
        add("▁" + ch)
    for w in _WORDS:
        for word in (w, w.capitalize()):
            marked = "▁" + word
            for end in range(2, len(marked) + 1):
                add(marked[:end])
            for end in range(2, len(word) + 1):
                add(word[:end])
    scores = [0.0] * len(tokens)
    # Longer pieces win merges (the SPM tokenizer merges the best-scoring bigram first); ties by order.
    scores += [float(len(p)) - i * 1e-4 for i, p in enumerate(pieces)]
    tokens += pieces
    types += [NORMAL] * len(pieces)
    return tokens, scores, types


# ---------------------------------------------------------------------------------------------- GGUF writer


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _kv(key: str, value) -> bytes:
    """One metadata pair; ints are u32, floats f32, lists are arrays of str / f32 / i32 by their first element."""
    out = _str(key)
    if isinstance(value, bool):
        return out + struct.pack("<I?", _BOOL, value)
    if isinstance(value, int):
        return out + struct.pack("<II", _U32, value)
    if isinstance(value, float):
        return out + struct.pack("<If", _F32, value)
    if isinstance(value, str):
        return out + struct.pack("<I", _STR) + _str(value)
    if isinstance(value, list):
        head = struct.pack("<I", _ARR)
        if isinstance(value[0], str):
            return out + head + struct.pack("<IQ", _STR, len(value)) + b"".join(_str(v) for v in value)
        if isinstance(value[0], float):
            return out + head + struct.pack("<IQ", _F32, len(value)) + np.asarray(value, "<f4").tobytes()
        return out + head + struct.pack("<IQ", _I32, len(value)) + np.asarray(value, "<i4").tobytes()
    raise TypeError(f"unsupported metadata value for {key}: {value!r}")


def _pad(n: int) -> int:
    return (-n) % ALIGNMENT


def _tensors(rng: np.random.Generator, n_vocab: int, biases: bool) -> list[tuple[str, np.ndarray]]:
    kv = N_HEAD_KV * HEAD_DIM

    def mat(rows: int, cols: int, scale: float = 0.02) -> np.ndarray:  # numpy (rows, cols) == ggml ne [cols, rows]
        return (rng.standard_normal((rows, cols), dtype=np.float32) * scale).astype("<f2")

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype="<f4")

    out = [("token_embd.weight", mat(n_vocab, N_EMBD, 1.0)), ("output_norm.weight", ones(N_EMBD))]
    for i in range(N_LAYER):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", ones(N_EMBD)),
            (p + "attn_q.weight", mat(N_EMBD, N_EMBD, 0.2)),
            (p + "attn_k.weight", mat(kv, N_EMBD, 0.2)),
            (p + "attn_v.weight", mat(kv, N_EMBD, 0.2)),
            (p + "attn_output.weight", mat(N_EMBD, N_EMBD, 0.05)),
            (p + "ffn_norm.weight", ones(N_EMBD)),
            (p + "ffn_gate.weight", mat(N_FF, N_EMBD, 0.1)),
            (p + "ffn_up.weight", mat(N_FF, N_EMBD, 0.1)),
            (p + "ffn_down.weight", mat(N_EMBD, N_FF, 0.05)),
        ]
        if biases:  # Qwen2's attention has Q/K/V biases (required by llama.cpp's qwen2 loader)
            out += [(p + "attn_q.bias", mat(1, N_EMBD)[0].astype("<f4")), (p + "attn_k.bias", mat(1, kv)[0].astype("<f4")),
                    (p + "attn_v.bias", mat(1, kv)[0].astype("<f4"))]
    return out


def _arch_tensors(rng: np.random.Generator, n_vocab: int, arch: str) -> list[tuple[str, np.ndarray]]:
    """The tensors of the architectures after llama and qwen2 (whose `_tensors` stays as it was: same bytes), in the
    shapes their llama.cpp loaders ask for. Norm weights are drawn near 1 so that each norm does something."""
    kv = N_HEAD_KV * HEAD_DIM

    def mat(rows: int, cols: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * scale).astype("<f2")

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype("<f4")

    out = [("token_embd.weight", mat(n_vocab, N_EMBD, 1.0)), ("output_norm.weight", norm(N_EMBD))]
    if arch == "olmo2":  # its loader requires an untied output matrix
        out.append(("output.weight", mat(n_vocab, N_EMBD, 0.1)))
    for i in range(N_LAYER):
        p = f"blk.{i}."
        if arch != "olmo2":
            out.append((p + "attn_norm.weight", norm(N_EMBD)))
        if arch == "phi3":  # Q, K and V rows stacked in one matrix
            out.append((p + "attn_qkv.weight", mat(N_EMBD + 2 * kv, N_EMBD, 0.2)))
        else:
            out += [(p + "attn_q.weight", mat(N_EMBD, N_EMBD, 0.2)), (p + "attn_k.weight", mat(kv, N_EMBD, 0.2)),
                    (p + "attn_v.weight", mat(kv, N_EMBD, 0.2))]
        out.append((p + "attn_output.weight", mat(N_EMBD, N_EMBD, 0.05)))
        if arch in ("qwen3", "gemma3"):  # RMS norm of each head's Q and K before RoPE
            out += [(p + "attn_q_norm.weight", norm(HEAD_DIM)), (p + "attn_k_norm.weight", norm(HEAD_DIM))]
        if arch == "olmo2":  # RMS norm over the whole Q and K projections
            out += [(p + "attn_q_norm.weight", norm(N_EMBD)), (p + "attn_k_norm.weight", norm(kv))]
        if arch in ("gemma3", "olmo2"):
            out.append((p + "post_attention_norm.weight", norm(N_EMBD)))
        if arch != "olmo2":
            out.append((p + "ffn_norm.weight", norm(N_EMBD)))
        if arch == "phi3":  # gate and up rows stacked in one matrix
            out.append((p + "ffn_up.weight", mat(2 * N_FF, N_EMBD, 0.1)))
        else:
            out += [(p + "ffn_gate.weight", mat(N_FF, N_EMBD, 0.1)), (p + "ffn_up.weight", mat(N_FF, N_EMBD, 0.1))]
        out.append((p + "ffn_down.weight", mat(N_EMBD, N_FF, 0.05)))
        if arch in ("gemma3", "olmo2"):
            out.append((p + "post_ffw_norm.weight", norm(N_EMBD)))
    return out


def _arch_meta(arch: str) -> dict:
    """Metadata beyond the common keys: what each loader reads besides them."""
    if arch == "gemma3":
        return {"gemma3.attention.key_length": HEAD_DIM, "gemma3.attention.value_length": HEAD_DIM,
                "gemma3.attention.sliding_window": ARCHS["gemma3"].sliding_window,
                "gemma3.attention.sliding_window_pattern": SWA_PATTERN,
                "gemma3.rope.freq_base": 1_000_000.0, "gemma3.rope.freq_base_swa": 10_000.0}
    if arch == "granite":  # Granite 3.x 2B's embedding, residual and logit scales (the logit scale is required);
        # its attention scale is 1/head_dim (0.0156), which leaves two random layers' attention nearly uniform, so
        # that positions hardly matter: 0.25 here, so that a block moved wrong shows in the logits.
        return {"granite.embedding_scale": 12.0, "granite.residual_scale": 0.22,
                "granite.attention.scale": 0.25, "granite.logit_scale": 8.0}
    if arch in ("qwen3", "olmo2"):
        return {f"{arch}.rope.freq_base": 1_000_000.0}
    return {}


def write_tiny_model(path: Path, seed: int = 0, space_prefix: bool = False, arch: str = "llama",
                     rope_freqs: np.ndarray | None = None, extra_meta: dict | None = None) -> Path:
    """Write the tiny chat model to `path` (byte-identical for a given seed and arguments) and return the path.
    `space_prefix`: SentencePiece's default (Llama 2 and others), for tests of what it changes. `arch`: one of
    `ARCHS` ("llama": NORM RoPE; "qwen2": NEOX RoPE, Q/K/V biases; the others as the module docstring lists).
    `rope_freqs`: per-pair RoPE frequency factors (float32 [HEAD_DIM / 2], the `rope_freqs.weight` tensor Llama 3.1
    files carry). `extra_meta`: more metadata ("{arch}." keys included)."""
    if arch not in ARCHS:
        raise ValueError(f"unsupported tiny architecture {arch!r}; expected one of {', '.join(ARCHS)}")
    spec = ARCHS[arch]
    path = Path(path)
    tokens, scores, types = vocabulary(("<unk>", "<s>", "</s>") + spec.turn_tokens)
    n_vocab = len(tokens)
    meta = {
        "general.architecture": arch,
        "general.name": "epi-tiny-spm",
        "general.alignment": ALIGNMENT,
        f"{arch}.vocab_size": n_vocab,
        f"{arch}.context_length": N_CTX_TRAIN,
        f"{arch}.embedding_length": N_EMBD,
        f"{arch}.block_count": N_LAYER,
        f"{arch}.feed_forward_length": N_FF,
        f"{arch}.attention.head_count": N_HEAD,
        f"{arch}.attention.head_count_kv": N_HEAD_KV,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
        f"{arch}.rope.dimension_count": HEAD_DIM,
        f"{arch}.rope.freq_base": 10000.0,
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.unknown_token_id": UNK_ID,
        "tokenizer.ggml.bos_token_id": BOS_ID,
        "tokenizer.ggml.eos_token_id": tokens.index(spec.eos),
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.ggml.add_eos_token": False,
        # SPM's default prepends "▁" to every text and after every special token: off, so that tokenizing pieces of
        # a text separately concatenates like a GPT-2 BPE vocabulary does and "a" round-trips to "a", not " a".
        "tokenizer.ggml.add_space_prefix": space_prefix,
        "tokenizer.chat_template": spec.chat_template,
    }
    meta.update(_arch_meta(arch))
    meta.update(extra_meta or {})
    rng = np.random.default_rng(seed)
    if arch in ("llama", "qwen2"):
        tensors = _tensors(rng, n_vocab, biases=arch == "qwen2")
    else:
        tensors = _arch_tensors(rng, n_vocab, arch)
    if rope_freqs is not None:
        tensors.append(("rope_freqs.weight", np.asarray(rope_freqs, dtype="<f4").reshape(HEAD_DIM // 2)))

    head = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(meta))]
    head += [_kv(k, v) for k, v in meta.items()]
    offset = 0
    for name, arr in tensors:
        ggml_type = _GGML_F16 if arr.dtype == np.float16 else _GGML_F32
        ne = arr.shape[::-1]
        head.append(_str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
                    + struct.pack("<IQ", ggml_type, offset))
        offset += arr.nbytes + _pad(arr.nbytes)
    header = b"".join(head)
    with open(path, "wb") as f:
        f.write(header + b"\0" * _pad(len(header)))
        for _, arr in tensors:
            f.write(arr.tobytes())
            f.write(b"\0" * _pad(arr.nbytes))
    return path


if __name__ == "__main__":  # pragma: no cover - a manual aid: python tests/tiny_gguf.py /tmp/tiny.gguf [arch]
    import sys

    print(write_tiny_model(Path(sys.argv[1] if len(sys.argv) > 1 else "tiny.gguf"),
                           arch=sys.argv[2] if len(sys.argv) > 2 else "llama"))
