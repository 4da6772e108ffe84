"""The held-out question sets (bench/heldout/*.json) are well formed and answerable from their documents: each gold
answer lies inside its gold excerpt, and each excerpt lies in the text epi extracts from the documents (checked
where the documents exist on this machine). No model: this guards the data, bench/answers/heldout.py measures answers."""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "answers"))

import heldout  # noqa: E402
from eval import normalize, squash  # noqa: E402

from episodic_cli.engine.documents.sources import Skipped, discover, load_document  # noqa: E402

SETS = sorted((ROOT / "bench" / "heldout").glob("*.json"))


def test_there_are_sets_of_every_kind():
    kinds = {json.loads(p.read_text(encoding="utf-8"))["kind"] for p in SETS}
    assert kinds == {"pdf", "book", "code", "html", "epub"}


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


def other_copy(spec: dict, paths: list[Path]) -> str | None:
    """Why this machine's documents are not the ones the questions were written on, or None when they are."""
    if not all(p.exists() for p in paths):
        return f"documents not on this machine: {spec['documents']}"
    made = spec["written_on"]
    if "package_version" in made:
        package = spec["documents"][0].split(":", 1)[1]
        here = importlib.metadata.version(package)
        if here != made["package_version"]:
            return f"{package} {here} here, {made['package_version']} in the set"
        return None
    for document, digest in made["sha256"].items():
        if hashlib.sha256(Path(document).read_bytes()).hexdigest() != digest:
            return f"another copy of {document} here"
    here = importlib.metadata.version("pypdf")
    if "pypdf" in made and here != made["pypdf"]:
        return f"pypdf {here} here (its text extraction may differ), {made['pypdf']} in the set"
    return None


@pytest.mark.parametrize("path", SETS, ids=[p.stem for p in SETS])
def test_gold_excerpts_are_in_the_extracted_documents(path: Path):
    """On the very documents (and PDF reader) the set was written on, every excerpt is in epi's extracted text."""
    spec = json.loads(path.read_text(encoding="utf-8"))
    paths = [heldout.resolve(d) for d in spec["documents"]]
    reason = other_copy(spec, paths)
    if reason:
        pytest.skip(reason)
    found = [f for f in discover(paths) if not isinstance(f, Skipped)]
    text = squash(" ".join(load_document(p, shown).text for p, shown in found))
    assert [q["qid"] for q in spec["questions"] if squash(q["gold_text"]) not in text] == []
