"""A code file's summary is told the file's top-level definitions in order (engine/answer/map_writer.py), so that it
names what the file defines. No model: the list and the request."""
import json
from types import SimpleNamespace

from episodic_cli.engine.answer.map_writer import MAX_LISTED_DEFINITIONS, top_definitions
from episodic_cli.engine.prompt import part_summary_request


def event(path, also=()):
    return SimpleNamespace(section=json.dumps({"path": path, "also": list(also)}))


def test_top_level_definitions_in_order_of_first_appearance():
    events = [
        SimpleNamespace(section=None),  # text before the first definition
        event([["class", None, "Retrying"], ["def", None, "__call__"]], [[["def", None, "_first_set"]]]),
        event([["class", None, "Retrying"], ["def", None, "iter"]], [[["class", None, "RetryError"]]]),
        event([["def", None, "retry"]]),
        event([["chapter", "1", "Not code"]]),
    ]
    assert top_definitions(events) == ["class Retrying", "def _first_set", "class RetryError", "def retry"]


def test_the_list_is_capped():
    events = [event([["def", None, f"f{i}"]]) for i in range(MAX_LISTED_DEFINITIONS + 5)]
    assert len(top_definitions(events)) == MAX_LISTED_DEFINITIONS


def test_the_request_lists_them_for_code_only():
    code = part_summary_request("lines 1-90", "tenacity/stop.py", True, ["class stop_base", "class stop_any"])
    assert "Its top-level definitions, in order: class stop_base, class stop_any." in code
    assert "top-level definitions" not in part_summary_request("lines 1-90", "tenacity/stop.py", True, [])
    assert "definitions" not in part_summary_request("ch. 3", "book.txt", False)
