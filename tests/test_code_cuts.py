"""Events of code follow definitions (engine/ingest/code_cuts.py): a class or function that fits in an event is never cut
in the middle; one too long for an event is cut between its statements. First the segmenter on the bundled model's
real tokens with many surprise patterns, then real ingests (surprise from llama.cpp, refinement on): the events
keep definitions whole, and an interrupted ingest of a code file resumes to the very events of an uninterrupted
one."""
from __future__ import annotations

import ast

import numpy as np
import pytest

from conftest import workspace_for
from episodic_cli.engine.ingest.code_cuts import MIN_CODE_TOKENS, CodeCuts
from episodic_cli.engine.ingest.segment import SegmentParams, clean_cut_mask, segment
from episodic_cli.engine.ingest.token_offsets import token_char_offsets
from test_checkpoints import SMALL, events_of, ingest, ingest_whole, power_cut_after


def python_source(seed: int) -> str:
    """A module of functions, a class with methods and one function too long for a SMALL event, with comments above
    definitions and statements that span lines."""
    rng = np.random.default_rng(seed)
    words = "value limit cache folder config path user data site state index count".split()
    out = ['"""Helpers for a small program."""', "", "import os", "", "DEFAULT_LIMIT = 3", ""]
    for i in range(12):
        name = f"{rng.choice(words)}_{rng.choice(words)}_{i}"
        body = [f"    total = {i}"] + [f"    total += {j} * limit" for j in range(int(rng.integers(1, 7)))]
        out += ["", f"# {name} adds up what it was given.", f"def {name}(items, limit=DEFAULT_LIMIT):",
                f'    """Return the sum for {name}."""', *body, "    return total", ""]
    out += ["", "class Store:", '    """Keeps values."""', ""]
    for i in range(5):
        out += [f"    def method_{i}(self, key):", f'        """Method {i}."""',
                *[f"        self.{rng.choice(words)} = key + {j}" for j in range(int(rng.integers(1, 6)))],
                "        return key", ""]
    out += ["", "def long_function(x):", '    """A function longer than an event."""']
    for j in range(40):
        out += [f"    x = x + {j}  # step {j}"]
        if j % 10 == 5:
            out += ["    table = {", f'        "a": {j},', f'        "b": {j + 1},', "    }"]
    out += ["    return x", ""]
    return "\n".join(out)


def definitions(text: str) -> list[tuple[int, int, str]]:
    """(first char, end char, name) of every class and function, decorators and the comment lines above included."""
    lines = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    src = text.split("\n")
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            while first > 1 and src[first - 2].strip().startswith("#"):
                first -= 1
            end = lines[node.end_lineno] if node.end_lineno < len(lines) else len(text)
            out.append((lines[first - 1], end, node.name))
    return out


def cut_inside(text: str, cut_chars: list[int], start: int, end: int) -> bool:
    """A cut lies inside [start, end) beyond its first line's indentation."""
    return any(start < c < end and text[start:c].strip() for c in cut_chars)


def tokens_of(model, text: str):
    pieces = model.pieces()
    token_pieces = [pieces[t] for t in model.tokenize(text)]
    return clean_cut_mask(token_pieces), token_char_offsets(text, token_pieces)


@pytest.fixture(scope="module")
def source(bundled_model):
    text = python_source(seed=3)
    clean, offsets = tokens_of(bundled_model, text)
    return text, clean, offsets


def fitting(text: str, offsets: np.ndarray, max_tokens: int) -> list[tuple[int, int, str]]:
    return [(a, b, name) for a, b, name in definitions(text)
            if np.searchsorted(offsets, b) - np.searchsorted(offsets, a) <= max_tokens]


@pytest.mark.parametrize("seed", range(6))
def test_no_definition_that_fits_is_cut(source, seed):
    text, clean, offsets = source
    n = len(offsets) - 1
    surprise = np.random.default_rng(seed).gamma(2.0, 1.0, n).astype(np.float32)
    cuts = CodeCuts(text, python=True)
    costs = lambda s, lo, hi: cuts.costs(offsets, clean, s, lo, hi, SMALL.max_tokens)  # noqa: E731
    whole = fitting(text, offsets, SMALL.max_tokens)
    assert len(whole) >= 12 and any(name == "long_function" for *_, name in definitions(text))

    by_surprise = segment(surprise, clean, SMALL)
    by_definitions = segment(surprise, clean, SMALL, cut_costs=costs)
    # Surprise alone cuts some of them (so the check below can fail), the code cuts none.
    broken = [name for a, b, name in whole if cut_inside(text, [offsets[s] for s, _ in by_surprise[1:]], a, b)]
    assert broken
    assert [name for a, b, name in whole
            if cut_inside(text, [offsets[s] for s, _ in by_definitions[1:]], a, b)] == []
    # The events still tile the file within their bounds; only an event cut short to keep the next definition
    # whole is smaller than min_tokens, and never below MIN_CODE_TOKENS.
    assert by_definitions[0][0] == 0 and by_definitions[-1][1] == n
    assert all(a == b for (_, a), (b, _) in zip(by_definitions, by_definitions[1:]))
    assert all(MIN_CODE_TOKENS <= e - s <= SMALL.max_tokens for s, e in by_definitions[:-1])


def test_a_function_too_long_for_an_event_is_cut_between_its_statements(source):
    text, clean, offsets = source
    n = len(offsets) - 1
    surprise = np.random.default_rng(11).gamma(2.0, 1.0, n).astype(np.float32)
    cuts = CodeCuts(text, python=True)
    spans = segment(surprise, clean, SMALL, cut_costs=lambda s, lo, hi: cuts.costs(offsets, clean, s, lo, hi, 96))
    [(a, b, _)] = [d for d in definitions(text) if d[2] == "long_function"]
    inside = [int(offsets[s]) for s, _ in spans if a < offsets[s] < b]
    assert len(inside) >= 2  # it is cut...
    tree = ast.parse(text)
    [func] = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "long_function"]
    lines = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    statement_starts = {lines[st.lineno - 1] for st in func.body}
    for c in inside:  # ...only where one of its statements begins (in its indentation), never inside the dict
        line_start = text.rfind("\n", 0, c) + 1
        assert line_start in statement_starts and not text[line_start:c].strip(), text[line_start:c + 30]


def test_other_languages_keep_functions_whole(bundled_model):
    parts = []
    for i in range(10):
        body = "\n".join(f"    total += step{j}(items, {i});" for j in range(2 + i % 5))
        parts.append(f"// helper {i}\nfunction helper{i}(items) {{\n    let total = 0;\n{body}\n    return total;\n}}\n")
    text = "\n".join(parts)
    clean, offsets = tokens_of(bundled_model, text)
    n = len(offsets) - 1
    cuts = CodeCuts(text, python=False)
    starts = [text.index(f"// helper {i}\n") for i in range(10)]
    ends = starts[1:] + [len(text)]
    for seed in range(3):
        surprise = np.random.default_rng(seed).gamma(2.0, 1.0, n).astype(np.float32)
        spans = segment(surprise, clean, SMALL, cut_costs=lambda s, lo, hi: cuts.costs(offsets, clean, s, lo, hi, 96))
        chars = [int(offsets[s]) for s, _ in spans[1:]]
        assert not any(cut_inside(text, chars, a, b) for a, b in zip(starts, ends)), seed


def test_code_cuts_can_be_turned_off_and_old_stores_read_as_surprise():
    assert SegmentParams().code_cuts == "definitions"
    assert SegmentParams.from_recorded({"min_tokens": 160}).code_cuts == "surprise"
    with pytest.raises(ValueError):
        SegmentParams(code_cuts="lines").validate()


# ------------------------------------------------------------------------------------------ real ingests


@pytest.fixture(scope="module")
def code_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("code") / "helpers.py"
    path.write_text(python_source(seed=5), encoding="utf-8")  # ~2,400 tokens: many SMALL events, several groups
    return path


@pytest.fixture(scope="module")
def uninterrupted_code(engine, code_file, tmp_path_factory):
    return ingest_whole(engine, tmp_path_factory.mktemp("whole-code") / "store", code_file)


def test_a_real_ingest_keeps_every_definition_that_fits_whole(engine, code_file, uninterrupted_code):
    _, events = uninterrupted_code
    text = code_file.read_text(encoding="utf-8")
    pieces = engine.model.pieces()
    offsets = token_char_offsets(text, [pieces[t] for t in engine.model.tokenize(text)])
    whole = fitting(text, offsets, SMALL.max_tokens)
    assert len(events) > 10 and len(whole) >= 12
    starts = [e[3] for e in events[1:]]
    assert [name for a, b, name in whole if cut_inside(text, starts, a, b)] == []


def test_an_interrupted_code_ingest_resumes_to_the_same_events(engine, code_file, uninterrupted_code, tmp_path,
                                                                 monkeypatch):
    store_dir = tmp_path / "store"
    ws = workspace_for(engine, store_dir)
    power_cut_after(monkeypatch, 2)
    [failed] = ingest(ws, store_dir, code_file)
    assert failed.status == "failed"
    monkeypatch.undo()
    [resumed] = ingest(ws, store_dir, code_file)
    assert resumed.status == "ingested", resumed.error
    assert events_of(store_dir)[1] == uninterrupted_code[1]
