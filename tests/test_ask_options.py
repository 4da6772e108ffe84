"""A question's choices as one record (engine/ask_options.py): every combination that cannot run is refused in one
line saying what to do, the defaults are `epi ask`'s own, and the store's default mode is checked like a named one.
No model, no store: the record is checked where it is made."""
from __future__ import annotations

import dataclasses
import inspect
import re
from types import SimpleNamespace

import pytest

from episodic_cli import app as app_module
from episodic_cli.api import Archive, read_kind
from episodic_cli.engine.ask_options import AskOptions
from episodic_cli.engine.errors import EpiError
from episodic_cli.engine.retrieval.question_kind import QuestionKind
from episodic_cli.engine.workspace import Workspace


@pytest.mark.parametrize("choices,needles", [
    ({"k": 0}, ["-k", "at least 1"]),
    ({"neighbours": -1}, ["--neighbours", "0 or more"]),
    ({"mode": "gpu"}, ["'gpu'", "use text or kv"]),
    ({"answer_tokens": 0}, ["token limit", "at least 1"]),
    ({"cold_seconds": -1.0}, ["--cold-seconds", "0 (no limit) or more"]),
    ({"epman": True, "mode": "text"}, ["--epman", "kv mode"]),
    ({"layered": True, "mode": "text"}, ["--layered", "kv mode"]),
    ({"layered": True, "narrow": True}, ["--layered", "leave out --narrow"]),
    ({"layered": True, "kind": QuestionKind.WHOLE}, ["--layered", "--read whole", "leave one of them out"]),
    ({"epman": True, "kind": QuestionKind.OVERVIEW}, ["--epman", "--read overview", "leave one of them out"]),
])
def test_a_combination_that_cannot_run_is_refused_in_one_line(choices, needles):
    with pytest.raises(EpiError) as refused:
        AskOptions(**choices)
    message = str(refused.value)
    assert "\n" not in message and all(n in message for n in needles), message
    # a variation of valid choices is checked the same way
    with pytest.raises(EpiError, match=f"^{re.escape(message)}$"):
        dataclasses.replace(AskOptions(), **choices)


@pytest.mark.parametrize("choices", [
    {"layered": True, "narrow": False, "mode": "kv"},
    {"layered": True, "kind": QuestionKind.LOOKUP},
    {"epman": True, "mode": "kv", "narrow": True},
    {"mode": "text", "cold_seconds": None, "narrow": True, "kind": QuestionKind.WHOLE},
    {"cold_seconds": 0, "neighbours": 0, "k": 1, "answer_tokens": 1},
])
def test_combinations_that_run_are_kept_as_given(choices):
    options = AskOptions(**choices)
    assert all(getattr(options, name) == value for name, value in choices.items())


def test_the_record_is_frozen_and_keeps_its_globs_as_a_tuple():
    options = AskOptions(docs=["book.pdf", "src/*.py"])
    assert options.docs == ("book.pdf", "src/*.py")
    assert AskOptions(docs=[]).docs is None  # no glob: every document, as None
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.k = 9
    assert hash(options) == hash(AskOptions(docs=("book.pdf", "src/*.py")))


def test_the_defaults_are_what_epi_ask_uses():
    """`epi ask` with no option answers with AskOptions(), and so do the Python API's ask() and begin()."""
    cli = {name: p.default for name, p in inspect.signature(app_module.ask).parameters.items()}
    defaults = AskOptions()
    assert defaults.k == cli["k"] and defaults.neighbours == cli["neighbours"]
    assert defaults.mode is cli["mode"] is None  # the store decides
    assert defaults.docs is cli["doc"] is None
    assert defaults.narrow is cli["whole"] is None  # neither --whole nor --narrow: as the model reads best
    assert defaults.short is cli["short"] is True
    assert defaults.layered is cli["layered"] is False and defaults.epman is cli["epman"] is False
    assert defaults.cold_seconds == cli["cold_seconds"] > 0
    assert defaults.kind is cli["read"].kind is None  # --read auto: the question decides
    assert defaults.answer_tokens is None and "answer_tokens" not in cli  # the path's own limit
    api = {name: p.default for name, p in inspect.signature(Archive.begin).parameters.items()}
    assert AskOptions(k=api["k"], mode=api["mode"], neighbours=api["neighbours"], docs=api["doc"],
                      narrow=api["narrow"], short=api["short"], layered=api["layered"], epman=api["epman"],
                      cold_seconds=api["cold_seconds"], kind=read_kind(api["read"]),
                      answer_tokens=api["answer_tokens"]) == defaults


@pytest.mark.parametrize("choice,needle", [({"epman": True}, "--epman"), ({"layered": True}, "--layered")])
def test_a_kv_only_choice_is_refused_on_a_store_without_blocks(tmp_path, choice, needle):
    """No mode named: the store's (text for a KV budget of 0) is filled in and checked by the same rule."""
    ws = Workspace(store=str(tmp_path / "store"))
    without_blocks, with_blocks = SimpleNamespace(kv_budget=0), SimpleNamespace(kv_budget=1 << 30)
    with pytest.raises(EpiError, match=f"^{needle} .* needs kv mode"):
        ws.resolve(without_blocks, AskOptions(**choice))
    assert ws.resolve(with_blocks, AskOptions(**choice)).mode == "kv"
    assert ws.resolve(without_blocks, AskOptions(mode="kv", **choice)).mode == "kv"  # a named mode stays


@pytest.mark.parametrize("pool,layered,needle", [(20_000, False, "add --layered"), (100, True, "holds 4,096-48,000"),
                                                 (1_000_000, True, "holds 4,096-48,000")])
def test_the_python_api_refuses_a_pool_the_cli_refuses(tmp_path, pool, layered, needle):
    """Archive.ask checks --pool as `epi ask` does, before any store or model is opened (a pool outside the range
    used to reach the answerer unchecked)."""
    archive = Archive(tmp_path / "no-store")
    with pytest.raises(EpiError, match=needle):
        archive.ask("what is it?", layered=layered, pool=pool)
    assert not (tmp_path / "no-store").exists()
