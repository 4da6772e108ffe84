"""A question's choices as one record (engine/ask_options.py): every combination that cannot run is refused in one
line saying what to do, the defaults are `epi ask`'s own and written once, and the store's default mode is checked
like a named one. No model, no store: the record is checked where it is made."""
from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from episodic_cli import app as app_module
from episodic_cli.api import Archive
from episodic_cli.engine import ask_options
from episodic_cli.engine.ask_options import AskOptions, AskRequest
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
    """`epi ask` with no option answers with AskOptions(), and so do the Python API and the MCP ask tool."""
    cli = {name: p.default for name, p in inspect.signature(app_module.ask).parameters.items()}
    defaults = AskOptions()
    assert AskRequest.build("q", k=cli["k"], mode=cli["mode"], neighbours=cli["neighbours"], doc=cli["doc"],
                            narrow=cli["whole"], short=cli["short"], layered=cli["layered"], epman=cli["epman"],
                            cold_seconds=cli["cold_seconds"], second_look=cli["second_look"], read=cli["read"].value,
                            pool=cli["pool"]) == AskRequest("q")
    assert defaults.mode is None and defaults.kind is None and defaults.cold_seconds > 0  # the store, the question
    assert defaults.answer_tokens is None and "answer_tokens" not in cli  # the path's own limit
    assert AskRequest.build("q") == AskRequest("q", (), defaults, None)  # the API's keywords, none given


ROOT = Path(__file__).resolve().parents[1]
FACES = ["episodic_cli/app.py", "episodic_cli/api.py", "episodic_cli/mcp_server.py", "episodic_cli/repl.py"]
# A face's name for an ask option -> the record's (AskOptions' field, or AskRequest's pool)
FACE_NAMES = {"doc": "docs", "whole": "narrow", "read": "kind"}


def _record_default(name: str):
    name = FACE_NAMES.get(name, name)
    fields = {f.name: f for f in dataclasses.fields(AskOptions)} | {"pool": dataclasses.fields(AskRequest)[-1]}
    return fields[name].default if name in fields else dataclasses.MISSING


def _builds_a_request(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id in ("AskOptions", "AskRequest") for n in ast.walk(node))


def test_each_ask_option_default_is_written_once():
    """A face that builds a request (CLI ask and chat, the REPL, the Python API, the MCP tool) names each ask
    option's default by ask_options' constant, never by its value again: a literal there would drift from
    AskOptions' (cold_seconds had its default in five places). None stands for "not given" only where the record's
    own default is None. And each of those constants is assigned in one place in the package."""
    written_again = []
    for face in FACES:
        tree = ast.parse((ROOT / face).read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not _builds_a_request(fn):
                continue
            args = fn.args.args + fn.args.kwonlyargs
            defaults = [None] * (len(fn.args.args) - len(fn.args.defaults)) + fn.args.defaults + fn.args.kw_defaults
            for arg, default in zip(args, defaults):
                record = _record_default(arg.arg)
                if default is None or record is dataclasses.MISSING:
                    continue
                named = {n.id for n in ast.walk(default) if isinstance(n, ast.Name)} - {"ReadChoice"}
                if isinstance(default, ast.Constant) and not (default.value is None and record is None) \
                        or any(not hasattr(ask_options, n) for n in named):
                    written_again.append(f"{face}:{default.lineno} {fn.name}({arg.arg}={ast.unparse(default)})")
    assert not written_again, written_again
    constants = {n for n in ask_options.__all__ if n.isupper() and n not in ("MODES", "READ_CHOICES")}
    assigned: dict[str, list[str]] = {}
    for path in (ROOT / "episodic_cli").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Name) and t.id in constants:
                    assigned.setdefault(t.id, []).append(str(path.relative_to(ROOT)))
    assert {name: len(where) for name, where in assigned.items()} == dict.fromkeys(constants, 1), assigned


def test_read_choices_are_listed_once():
    """`--read`'s values: ask_options.READ_CHOICES, which the CLI's choice, the MCP tool's Literal and the API's
    check all take; a value outside it is refused in one line by every face."""
    for face in FACES:
        tree = ast.parse((ROOT / face).read_text())
        listed = [n for n in ast.walk(tree) if isinstance(n, (ast.Tuple, ast.List, ast.Set))
                  and {"lookup", "overview"} <= {getattr(e, "value", None) for e in n.elts}]
        assert not listed, f"{face} lists --read's values again"
    assert [c.value for c in app_module.ReadChoice] == list(ask_options.READ_CHOICES)
    with pytest.raises(EpiError, match="unknown read 'explain': use auto, lookup, whole, overview"):
        AskRequest.build("q", read="explain")


def test_a_request_is_checked_as_it_is_made():
    with pytest.raises(EpiError, match="has no words"):
        AskRequest("???")
    with pytest.raises(EpiError, match="must be a string"):
        AskRequest(None)
    with pytest.raises(EpiError, match="add --layered"):
        AskRequest("q", pool=20_000)
    request = AskRequest.build("q", doc="book.pdf", read="whole", history=[{"role": "user", "content": "a"}])
    assert request.options.docs == ("book.pdf",) and request.options.kind is QuestionKind.WHOLE
    assert request.turns == [{"role": "user", "content": "a"}] and AskRequest("q").turns is None


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
