"""all-MiniLM-L6-v2 forward pass in numpy: events in batches at ingest, questions one at a time.

This module reads the weights (model.safetensors) and tokenizer (tokenizer.json) of the bundled embedder and runs the
same BERT encoder, mean pooling and L2 normalisation as sentence-transformers, in numpy (weights memory-mapped:
~0.15 s to load with the tokenizer, ~15 ms per question). It replaced sentence-transformers, whose torch,
transformers, scipy and scikit-learn were 1.27 GB of the install and 6-8 s of import on a 2-core machine. A batch is
sorted by length and padded only to its longest text, with an attention mask, so padding costs little and changes
nothing. The vectors are held to sentence-transformers' within cosine 0.9999 on 1,000 real windows
(tests/test_embedder_reference.py; measured in docs/benchmarks.md, "Embedding without torch").
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from threadpoolctl import ThreadpoolController

MAX_SEQ_LENGTH = 256  # sentence-transformers' max_seq_length for this model (sentence_bert_config.json)
GELU_BLOCK = 1 << 16  # elements per block of GELU's passes: 256 KB of float32, within a core's L2 cache
# The forward runs BLAS on one thread: a batch's attention is a few hundred small products per layer, and OpenBLAS
# handing each to its thread pool made embedding 5x slower under load (docs/benchmarks.md, "Embedding on one BLAS
# thread"). threadpoolctl sets it around each forward, leaving numpy's setting for everything else.
BLAS_THREADS = 1
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


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: np.float32) -> np.ndarray:
    x = x - x.mean(axis=-1, keepdims=True)  # a new array, so the steps below may work in place
    x *= 1.0 / np.sqrt(np.square(x).mean(axis=-1, keepdims=True) + eps)
    x *= weight
    x += bias
    return x


def _gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU, x * Phi(x), with erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, below float32 resolution
    of the activations): numpy has no erf, and scipy (1 s of import) would only be for this. In place, in blocks of
    rows that stay in the CPU cache: over a whole (tokens, 1536) array each of its dozen passes went to memory and
    GELU took a fifth of a batch's time."""
    out = np.empty_like(x)
    step = max(1, GELU_BLOCK // x.shape[-1])
    for i in range(0, x.shape[0], step):
        _gelu_block(x, out, i, step)
    return out


def _gelu_block(x: np.ndarray, out: np.ndarray, i: int, step: int) -> None:
    """GELU of rows i..i+step of x into out (see _gelu)."""
    xs = x[i : i + step]
    a = np.abs(xs)
    a *= np.float32(1.0 / np.sqrt(2.0))
    # Beyond 9, erf is 1 in float32; the cap keeps exp(-a*a) out of the subnormal range, where x86 CPUs
    # compute 10-100x slower.
    np.minimum(a, np.float32(9.0), out=a)
    t = a * np.float32(0.3275911)
    t += np.float32(1.0)
    np.reciprocal(t, out=t)
    poly = t * np.float32(1.061405429)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += np.float32(c)
        poly *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    poly *= a  # 1 - erf(|x| / sqrt 2)
    poly *= xs
    poly *= np.float32(0.5)  # y = x (1 - erf(|x|/sqrt 2)) / 2; GELU is x - y for x >= 0 and y below 0
    np.subtract(xs, poly, out=out[i : i + step])
    np.copyto(out[i : i + step], poly, where=xs < 0)


class QueryEncoder:
    """Embeds texts: token ids -> BERT (6 layers) -> mean over the real tokens -> unit vector (float32)."""

    def __init__(self, model_dir: Path, window_overlap: int = 0):
        from tokenizers import Tokenizer

        config = json.loads((model_dir / "config.json").read_text())
        self.heads = config["num_attention_heads"]
        self.layers = config["num_hidden_layers"]
        self.eps = np.float32(config["layer_norm_eps"])
        if config.get("hidden_act") != "gelu" or config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"unsupported embedder architecture in {model_dir}")
        self.w = read_safetensors(model_dir / "model.safetensors")
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        # Truncation with a stride keeps what does not fit as further windows (`overflowing`), each starting
        # `window_overlap` pieces before the previous one ended; the first window is plain truncation.
        self.tokenizer.enable_truncation(max_length=MAX_SEQ_LENGTH, stride=window_overlap)
        self._threads = ThreadpoolController()

    def _encodings(self, texts: list[str]) -> list:
        # sentence-transformers strips each text before tokenizing; so must we, or the vectors differ.
        return self.tokenizer.encode_batch([t.strip() for t in texts])

    def truncated_ids(self, texts: list[str]) -> list[list[int]]:
        """Each text's first MAX_SEQ_LENGTH pieces (with [CLS] and [SEP]): what sentence-transformers reads."""
        return [e.ids for e in self._encodings(texts)]

    def window_ids(self, texts: list[str]) -> list[list[list[int]]]:
        """Each text as all the overlapping windows of MAX_SEQ_LENGTH pieces it takes, none of it dropped."""
        return [[e.ids] + [o.ids for o in e.overflowing] for e in self._encodings(texts)]

    def encode(self, text: str) -> np.ndarray:
        """The vector of `text`'s first MAX_SEQ_LENGTH pieces, as sentence-transformers gives it."""
        return self.encode_ids(self.truncated_ids([text])[0])

    def encode_ids(self, ids: list[int]) -> np.ndarray:
        with self._threads.limit(limits=BLAS_THREADS, user_api="blas"):
            return self._forward(np.asarray(ids, dtype=np.int64)[None, :], None)[0]

    def encode_batch(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """One unit vector per text (its first MAX_SEQ_LENGTH pieces), (len(texts), dim) float32."""
        return self.encode_ids_batch(self.truncated_ids(texts), batch_size)

    def encode_ids_batch(self, ids: list[list[int]], batch_size: int = 32) -> np.ndarray:
        """One unit vector per token sequence. Sequences are grouped by length, as sentence-transformers does, so
        that each batch pads to a length close to all of its members."""
        with self._threads.limit(limits=BLAS_THREADS, user_api="blas"):
            return self._batches(ids, batch_size)

    def _batches(self, ids: list[list[int]], batch_size: int) -> np.ndarray:
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        out = np.empty((len(ids), self.w["embeddings.word_embeddings.weight"].shape[1]), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = len(ids[rows[0]])  # the longest of this batch: rows are in decreasing length
            batch = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=bool)
            for r, i in enumerate(rows):
                batch[r, : len(ids[i])] = ids[i]
                mask[r, : len(ids[i])] = True
            out[rows] = self._forward(batch, None if mask.all() else mask)
        return out

    def _forward(self, ids: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """(batch, tokens) ids, True where a token is real (None: all are) -> (batch, dim) unit vectors."""
        w = self.w
        b, n = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][0])
        d = x.shape[-1]
        x = _layer_norm(x.reshape(b * n, d), w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"],
                        self.eps)
        # Padding keys are pushed far below every real one, so softmax gives them (next to) no weight, as BERT's
        # extended attention mask does.
        bias = None if mask is None else np.where(mask, np.float32(0), np.float32(-1e4))[:, None, :]
        for i in range(self.layers):
            x = self._block(x, b, n, f"encoder.layer.{i}.", bias)
        x = x.reshape(b, n, d)
        if mask is None:
            pooled = x.mean(axis=1)
        else:  # the mean over real tokens only, as sentence-transformers' Pooling module takes it
            m = mask[:, :, None].astype(np.float32)
            pooled = (x * m).sum(axis=1) / m.sum(axis=1)
        return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        y = x @ self.w[name + ".weight"].T
        y += self.w[name + ".bias"]
        return y

    def _block(self, x: np.ndarray, b: int, n: int, p: str, bias: np.ndarray | None) -> np.ndarray:
        d = x.shape[-1]
        hd = d // self.heads
        # Heads first and contiguous: numpy's matmul hands stacked matrices to BLAS only when they are contiguous
        # (on transposed views it loops in C, 10x slower).
        q, k, v = (np.ascontiguousarray(self._linear(x, p + f"attention.self.{m}").reshape(b, n, self.heads, hd)
                                        .transpose(0, 2, 1, 3)) for m in ("query", "key", "value"))
        q *= np.float32(1.0 / np.sqrt(hd))
        ctx = np.empty((b, n, self.heads, hd), dtype=np.float32)
        for j in range(b):  # one text at a time: its (heads, n, n) scores stay in cache through the softmax
            scores = q[j] @ k[j].transpose(0, 2, 1)
            if bias is not None:
                scores += bias[j]
            scores -= scores.max(axis=-1, keepdims=True)
            # Weights below e^-60 of the largest count for nothing (padding keys land here too); without this
            # floor, exp gives subnormal floats that slow the next matmul 10x or more (the CPU handles them in
            # microcode).
            np.maximum(scores, np.float32(-60.0), out=scores)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            ctx[j] = (scores @ v[j]).transpose(1, 0, 2)
        ctx = ctx.reshape(b * n, d)
        a = self._linear(ctx, p + "attention.output.dense")
        a += x
        x = _layer_norm(a, self.w[p + "attention.output.LayerNorm.weight"], self.w[p + "attention.output.LayerNorm.bias"],
                        self.eps)
        h = _gelu(self._linear(x, p + "intermediate.dense"))
        o = self._linear(h, p + "output.dense")
        o += x
        return _layer_norm(o, self.w[p + "output.LayerNorm.weight"], self.w[p + "output.LayerNorm.bias"], self.eps)
