"""The held-out question sets (bench/heldout/*.json) are well formed and answerable from their documents: each gold
answer lies inside its gold excerpt, and each excerpt lies in the text epi extracts from the documents (checked
where the documents exist on this machine). No model: this guards the data, bench/heldout.py measures answers."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import heldout  # noqa: E402
from eval import normalize, squash  # noqa: E402

from episodic_cli.engine.sources import Skipped, discover, load_document  # noqa: E402

SETS = sorted((ROOT / "bench" / "heldout").glob("*.json"))


def test_there_are_sets_of_every_kind():
    kinds = {json.loads(p.read_text(encoding="utf-8"))["kind"] for p in SETS}
    assert kinds == {"pdf", "book", "code"}


@pytest.mark.parametrize("path", SETS, ids=[p.stem for p in SETS])
def test_set_is_well_formed(path: Path):
    spec = json.loads(path.read_text(encoding="utf-8"))
    assert spec["set"] == path.stem and spec["documents"] and spec["description"]
    qids = [q["qid"] for q in spec["questions"]]
    assert len(qids) == len(set(qids)) >= 10
    for q in spec["questions"]:
        assert q["question"].strip() and q["answer"].strip()
        assert f" {normalize(q['answer'])} " in f" {normalize(q['gold_text'])} ", q["qid"]
        assert f" {normalize(q['answer'])} " not in f" {normalize(q['question'])} ", q["qid"]  # not given away


@pytest.mark.parametrize("path", SETS, ids=[p.stem for p in SETS])
def test_gold_excerpts_are_in_the_extracted_documents(path: Path):
    spec = json.loads(path.read_text(encoding="utf-8"))
    paths = [heldout.resolve(d) for d in spec["documents"]]
    if not all(p.exists() for p in paths):
        pytest.skip(f"documents not on this machine: {spec['documents']}")
    found = [f for f in discover(paths) if not isinstance(f, Skipped)]
    text = squash(" ".join(load_document(p, shown).text for p, shown in found))
    missing = [q["qid"] for q in spec["questions"] if squash(q["gold_text"]) not in text]
    if spec["kind"] == "code" and missing:  # another version of the package is installed here
        pytest.skip(f"installed package differs from the one the questions were written on: {missing}")
    assert not missing
