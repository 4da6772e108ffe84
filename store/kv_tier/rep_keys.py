"""The `events.rep_keys` column: an event's representative keys as
u32 n_layer | u32 n_keys | u32 n_embd_k | float16 little-endian [n_layer, n_keys, n_embd_k]."""

from __future__ import annotations

import struct

import numpy as np

from ..records import StoreError

_HEAD = struct.Struct("<III")


def encode_rep_keys(keys: np.ndarray | None) -> bytes | None:
    if keys is None:
        return None
    keys = np.asarray(keys)
    if keys.ndim != 3 or keys.dtype != np.float16:
        raise ValueError(f"representative keys must be float16 [n_layer, n_keys, n_embd_k], got {keys.dtype} "
                         f"{keys.shape}")
    return _HEAD.pack(*keys.shape) + np.ascontiguousarray(keys, dtype="<f2").tobytes()


def encoded_size(keys: np.ndarray | None) -> int:
    """len(encode_rep_keys(keys)), without encoding them (what a block file will hold for them)."""
    return 0 if keys is None else _HEAD.size + 2 * int(np.asarray(keys).size)


def decode_rep_keys(blob: bytes | None) -> np.ndarray | None:
    """A read-only float16 view of the stored bytes, or None."""
    if blob is None:
        return None
    if len(blob) < _HEAD.size:
        raise StoreError("an event's representative keys are truncated; re-ingest its document")
    shape = _HEAD.unpack_from(blob)
    if len(blob) != _HEAD.size + 2 * int(np.prod(shape)):
        raise StoreError("an event's representative keys do not match their recorded shape; re-ingest its document")
    return np.frombuffer(blob, dtype="<f2", offset=_HEAD.size).reshape(shape)
