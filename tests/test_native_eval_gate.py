"""native/src/eval_gate.c: the C gate in front of a context's ggml eval callback. Closed it must answer exactly as
a callback that wants nothing (an ask: False, so ggml does not split the graph; a node it is told about: True, go
on) without calling the inner callback; open it must pass every argument through and return the inner answer.
Its use inside llama.cpp (queries read while armed, logits unchanged while disarmed) is tested in test_layered.py."""
from __future__ import annotations

import ctypes

from episodic_cli import native
from episodic_cli.engine.llama.query_capture import _EvalGate

CALLBACK = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_bool, ctypes.c_void_p)


def test_a_closed_gate_answers_in_c_and_an_open_one_forwards_everything():
    calls = []

    def inner(tensor, ask, user_data):
        calls.append((tensor, ask, user_data))
        return tensor == 0xBEEF

    inner_c = CALLBACK(inner)
    gate = _EvalGate(0, ctypes.cast(inner_c, ctypes.c_void_p), 0x1234)
    call = CALLBACK(native.eval_gate_address())
    user_data = ctypes.addressof(gate)
    assert [call(0xBEEF, True, user_data), call(0xBEEF, False, user_data)] == [False, True]
    assert calls == []
    gate.open = 1
    assert [call(0xBEEF, True, user_data), call(0xF00D, False, user_data)] == [True, False]
    assert calls == [(0xBEEF, True, 0x1234), (0xF00D, False, 0x1234)]
    gate.inner = None  # open without an inner callback: answers as closed, never jumps to address 0
    assert [call(0xBEEF, True, user_data), call(0xBEEF, False, user_data)] == [False, True]
