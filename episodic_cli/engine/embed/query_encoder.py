"""all-MiniLM-L6-v2 forward pass in numpy, for embedding questions.

Importing sentence-transformers (torch, transformers, scikit-learn) takes 6-8 s on a 2-core machine, far longer
than a kv-mode answer (~0.3 s from the question), so `epi ask` would spend nearly all its time importing. A question
is a handful of word pieces: this module reads the same weights (model.safetensors) and tokenizer (tokenizer.json)
of the bundled embedder and runs the same BERT encoder, mean pooling and L2 normalisation as sentence-transformers,
in numpy (weights memory-mapped: ~0.15 s to load with the tokenizer, ~15 ms per question). Ingest keeps
sentence-transformers for its batches; the test holds the two within a stated tolerance (tests/test_query_encoder.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

MAX_SEQ_LENGTH = 256  # sentence-transformers' max_seq_length for this model (sentence_bert_config.json)
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Read-only views into a .safetensors file (8-byte little-endian header size, JSON header, raw little-endian
    tensors), memory-mapped: nothing is copied, and a question touches only the embedding rows of its own tokens."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"tensor {name} has unsupported dtype {info['dtype']}")
        start, end = info["data_offsets"]
        tensors[name] = data[start:end].view(np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")).reshape(info["shape"])
    return tensors


def unit(v: np.ndarray) -> np.ndarray:
    """`v` scaled to length 1 (float32), as sentence-transformers' Normalize module does."""
    return (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, below float32 resolution of the activations): numpy has no erf
    # and scipy's import alone costs a noticeable part of what this module saves.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _gelu(x: np.ndarray) -> np.ndarray:
    return np.float32(0.5) * x * (np.float32(1.0) + _erf(x * np.float32(1.0 / np.sqrt(2.0))))


class QueryEncoder:
    """Embeds one text at a time: token ids -> BERT (6 layers) -> mean over tokens -> unit vector (float32)."""

    def __init__(self, model_dir: Path):
        from tokenizers import Tokenizer

        config = json.loads((model_dir / "config.json").read_text())
        self.heads = config["num_attention_heads"]
        self.layers = config["num_hidden_layers"]
        self.eps = config["layer_norm_eps"]
        if config.get("hidden_act") != "gelu" or config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"unsupported embedder architecture in {model_dir}")
        self.w = read_safetensors(model_dir / "model.safetensors")
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=MAX_SEQ_LENGTH)

    def token_ids(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer.encode(text.strip()).ids, dtype=np.int64)

    def encode(self, text: str) -> np.ndarray:
        w, ids = self.w, self.token_ids(text)
        n = len(ids)
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            x = self._block(x, p)
        return unit(x.mean(axis=0))  # one sequence, no padding: every token counts

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def _block(self, x: np.ndarray, p: str) -> np.ndarray:
        n, d = x.shape
        hd = d // self.heads
        q, k, v = (self._linear(x, p + f"attention.self.{m}").reshape(n, self.heads, hd).transpose(1, 0, 2)
                   for m in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) * np.float32(1.0 / np.sqrt(hd))
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        ctx = (scores @ v).transpose(1, 0, 2).reshape(n, d)
        x = _layer_norm(x + self._linear(ctx, p + "attention.output.dense"),
                        self.w[p + "attention.output.LayerNorm.weight"], self.w[p + "attention.output.LayerNorm.bias"],
                        self.eps)
        h = _gelu(self._linear(x, p + "intermediate.dense"))
        return _layer_norm(x + self._linear(h, p + "output.dense"), self.w[p + "output.LayerNorm.weight"],
                           self.w[p + "output.LayerNorm.bias"], self.eps)
