"""Per-layer visibility of KV cells, by sequence: the Python side of epi's llama.cpp patch.

The patch (native/llama_cpp/layer-visibility.patch, applied by install.sh) adds two functions to libllama:

    int32_t llama_set_layer_hidden_seqs(llama_context * ctx, int32_t il, const llama_seq_id * seq_ids, int32_t n);
    void    llama_clear_layer_hidden_seqs(llama_context * ctx);

In layer `il` (-1: every layer) the cells that belong to any of `seq_ids` get -INF in the KQ mask of every later
decode, as a graph input, so it works with flash attention on or off and on CPU, CUDA and Metal alike. A cell keeps
all its sequences, so a block loaded into the answer sequence and also into a sequence of its own can be shown to
some layers and hidden from others; cells only in the answer sequence (sink, question) can never be hidden.

They are looked up in the library llama_cpp has already loaded (not a second copy of it), so an unpatched
llama-cpp-python simply reports `available() == False` and everything else keeps working.
"""
from __future__ import annotations

import ctypes
from collections.abc import Iterable

from llama_cpp import llama_cpp as _bindings

UNAVAILABLE = ("this llama-cpp-python has no per-layer visibility (epi's llama.cpp patch is not in it); "
               "run ./install.sh to build the patched one")


class _Functions:
    """The patch's two entry points with their C signatures, or None when the loaded library lacks them."""

    def __init__(self, lib: ctypes.CDLL):
        self.set_hidden = lib.llama_set_layer_hidden_seqs
        self.set_hidden.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32), ctypes.c_int32]
        self.set_hidden.restype = ctypes.c_int32
        self.clear = lib.llama_clear_layer_hidden_seqs
        self.clear.argtypes = [ctypes.c_void_p]
        self.clear.restype = None


def _load(lib: ctypes.CDLL) -> _Functions | None:
    try:
        return _Functions(lib)
    except AttributeError:  # ctypes raises it for a symbol the library does not export
        return None


_functions = _load(_bindings._lib)


def available() -> bool:
    """Whether the loaded libllama carries the patch."""
    return _functions is not None


def _require() -> _Functions:
    if _functions is None:
        raise RuntimeError(UNAVAILABLE)
    return _functions


def set_hidden_seqs(ctx, layer: int, seq_ids: Iterable[int]) -> None:
    """Hide, in `layer` (-1: all layers), every cell of the sequences `seq_ids` from the query tokens of the
    following decodes; an empty `seq_ids` shows that layer everything again. `ctx` is a llama_context pointer
    (LlamaSession.ctx). Raises ValueError for a layer or sequence id llama.cpp refuses (it logs which)."""
    functions = _require()
    ids = [int(s) for s in seq_ids]
    array = (ctypes.c_int32 * len(ids))(*ids)
    if functions.set_hidden(ctx, int(layer), array, len(ids)) != 0:
        raise ValueError(f"llama.cpp refused to hide sequences {ids} in layer {layer} (a layer or sequence id out of "
                         "range, or a model whose attention is not the plain KV cache)")


def clear(ctx) -> None:
    """Every cell visible in every layer again: the graph is then exactly the unpatched one."""
    _require().clear(ctx)
