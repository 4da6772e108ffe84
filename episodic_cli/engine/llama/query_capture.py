"""Each layer's attention queries for the tokens of one decode, read from llama.cpp's graph while it runs.

Per-layer block selection (EM-LLM 3.4) needs the question's query in every layer; llama.cpp exposes none, so the
context is created with an eval callback (`cb_eval`) that, while armed, asks for the graph's `Qcur-<layer>` nodes
after RoPE ([head_dim, n_head, n_tokens] float32) and copies them out. Copies go through
`ggml_backend_tensor_get`, which reads host and device buffers alike, so layers offloaded to CUDA or Metal are read
the same way (one synchronisation per asked node; only while armed). ggml calls the callback once per node of every
decode (~1,000 calls a generated token with the bundled model), so the context's callback is epi's C gate
(native/src/eval_gate.c): disarmed, it declines each node in C and the graph runs unsplit at no Python cost (through
ctypes the calls took ~0.9 ms a token, ~5%); armed, it forwards to the Python reader here.

The tensor's fields are read through a ctypes mirror of `struct ggml_tensor` of the ggml that llama-cpp-python
0.3.36 vendors (ggml.h: GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64, GGML_MAX_SRC 10, GGML_MAX_NAME 64): the version is
pinned exactly, and the test checks the mirror against a node whose shape is known.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp as L
import numpy as np

from ... import native
from ..errors import EpiError

GGML_TYPE_F32 = 0
GGML_OP_ROPE = 48  # enum ggml_op of the vendored ggml.h (the 49th entry after GGML_OP_NONE = 0)


class GgmlTensor(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


def _ggml_base() -> ctypes.CDLL:
    """libggml-base from the folder llama-cpp-python loaded libllama from (its own, or LLAMA_CPP_LIB_PATH): that
    copy is already loaded, so dlopen returns it rather than a second one."""
    lib_dir = Path(getattr(L.llama_cpp, "_base_path", Path(L.llama_cpp.__file__).parent / "lib"))
    for name in ("libggml-base.so", "libggml-base.dylib", "ggml-base.dll"):
        if (lib_dir / name).exists():
            lib = ctypes.CDLL(str(lib_dir / name))
            lib.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
            lib.ggml_backend_tensor_get.restype = None
            return lib
    raise OSError(f"libggml-base not found in {lib_dir}")


class _EvalGate(ctypes.Structure):
    """struct epi_eval_gate (native/src/eval_gate.h)."""

    _fields_ = [("open", ctypes.c_int), ("inner", ctypes.c_void_p), ("inner_user_data", ctypes.c_void_p)]


class QueryCapture:
    """The eval callback of one context. Arm it, decode, disarm it: `queries()` then holds, per layer, the rows of
    every token decoded while armed, in decode order."""

    def __init__(self, n_layer: int, n_head: int, head_dim: int):
        self.n_layer, self.n_head, self.head_dim = n_layer, n_head, head_dim
        self._rows: list[list[np.ndarray]] = [[] for _ in range(n_layer)]
        self._tensor_get = _ggml_base().ggml_backend_tensor_get
        self._reader = L.ggml_backend_sched_eval_callback(self._on_node)  # kept alive as long as the context
        self._gate = _EvalGate(0, ctypes.cast(self._reader, ctypes.c_void_p), None)
        # what the context is created with (LlamaSession's eval_callback, eval_user_data)
        self.callback = L.ggml_backend_sched_eval_callback(native.eval_gate_address())
        self.user_data = ctypes.addressof(self._gate)

    def arm(self) -> None:
        self._rows = [[] for _ in range(self.n_layer)]
        self._gate.open = 1

    def disarm(self) -> None:
        self._gate.open = 0

    def queries(self) -> np.ndarray:
        """float32 [n_layer, n_tokens, n_head * head_dim]: post-RoPE queries of the tokens decoded while armed."""
        counts = {sum(len(r) for r in rows) for rows in self._rows}
        if len(counts) != 1 or counts == {0}:
            raise EpiError("--layered cannot read this model's attention queries (its llama.cpp graph names no "
                           "rotated Qcur-<layer> nodes); answer without --layered")
        return np.stack([np.concatenate(rows) if rows else np.zeros((0, self.n_head * self.head_dim), np.float32)
                         for rows in self._rows])

    def _wanted(self, t: GgmlTensor) -> int | None:
        """The layer of a post-RoPE query node ([head_dim, n_head, n_tokens]), else None. Several nodes of a layer
        are named Qcur-<layer> (the projection, its 3-D reshape, the rotation): the rotation is the one."""
        name = t.name
        if not name.startswith(b"Qcur-") or t.op != GGML_OP_ROPE or t.ne[0] != self.head_dim:
            return None
        if t.ne[1] != self.n_head or t.type != GGML_TYPE_F32 or t.ne[3] != 1:
            return None
        try:
            layer = int(name[5:])
        except ValueError:
            return None
        return layer if 0 <= layer < self.n_layer else None

    def _on_node(self, tensor: int, ask: bool, user_data) -> bool:
        if not self._gate.open:  # only reached so when installed without its gate (bench/kv/eval_callback_cost.py)
            return not ask  # asked: decline (no split); told about a node we never asked for: keep going
        t = GgmlTensor.from_address(tensor)
        layer = self._wanted(t)
        if ask or layer is None:
            return layer is not None if ask else True
        n_tokens = int(t.ne[2])
        rows = np.empty((n_tokens, self.n_head * self.head_dim), dtype=np.float32)
        contiguous = t.nb[0] == 4 and t.nb[1] == 4 * t.ne[0] and t.nb[2] == t.nb[1] * t.ne[1]
        if contiguous:
            self._tensor_get(tensor, rows.ctypes.data, 0, rows.nbytes)
        else:  # a view with gaps: read each token's heads row by row
            for i in range(n_tokens):
                for h in range(self.n_head):
                    dest = rows[i, h * self.head_dim : (h + 1) * self.head_dim]
                    self._tensor_get(tensor, dest.ctypes.data, i * t.nb[2] + h * t.nb[1], dest.nbytes)
        self._rows[layer].append(rows)
        return True
