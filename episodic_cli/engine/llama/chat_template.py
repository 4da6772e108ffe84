"""A model's prompts rendered with its own chat template, the Jinja text in its GGUF.

llama.cpp's `llama_chat_apply_template` does not run Jinja: it recognises a template by its markers and writes a
built-in format. Where it recognises the wrong one (OLMo 2's template is taken for GLM-Edge's, which drops each
turn's newline: tests/test_architectures.py), the model reads a prompt it was never trained on. So each model's
template is rendered once both ways on a probe conversation: where they agree, llama.cpp's renders (nothing changes
for the models it knows); where they differ, or llama.cpp knows none, the GGUF's Jinja does, in jinja2's sandbox, as
llama-cpp-python's own chat formatter renders it (jinja2 is its dependency). A template Jinja cannot render (one
that refuses a system turn) is left to llama.cpp, which folds that turn into the user's.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

JINJA, LLAMA_CPP = "jinja", "llama.cpp"

# Every role epi writes (system rules, a chat's earlier turns, the question), so the probe meets what answers meet.
PROBE = [{"role": "system", "content": "Answer from the sources."}, {"role": "user", "content": "Where is the key?"},
         {"role": "assistant", "content": "Under the mat."}, {"role": "user", "content": "And the door?"}]


# What a template's rendering raises on a conversation it cannot take: its own raise_exception, or a template that
# expects other message fields.
RENDER_ERRORS = (TemplateError, TypeError, ValueError, AttributeError)


class JinjaTemplate:
    """The GGUF's template, compiled once."""

    def __init__(self, source: str, bos_token: str, eos_token: str):
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        self.template = env.from_string(source)
        self.bos_token, self.eos_token = bos_token, eos_token

    def render(self, messages: list[dict[str, str]]) -> str:
        """The conversation and the assistant's turn opened. `enable_thinking` False: a reasoning model (Qwen3)
        answers at once instead of spending the answer's tokens on a hidden chain of thought."""
        return self.template.render(messages=messages, add_generation_prompt=True, bos_token=self.bos_token,
                                    eos_token=self.eos_token, raise_exception=_raise, strftime_now=_strftime_now,
                                    tools=None, enable_thinking=False)


def _raise(message: str):
    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def choose(jinja: JinjaTemplate | None, builtin: Callable[[list[dict[str, str]]], str | None]) -> str:
    """JINJA or LLAMA_CPP for a model: `builtin` renders with llama.cpp (None where it knows no such template)."""
    if jinja is None:
        return LLAMA_CPP
    try:
        ours = jinja.render(PROBE)
    except RENDER_ERRORS:
        return LLAMA_CPP
    return LLAMA_CPP if builtin(PROBE) == ours else JINJA
