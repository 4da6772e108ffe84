"""One answer, one JSON form (issue 56, item 3): `epi ask --json`, `Archive.ask` and `epi mcp`'s ask tool give the
same record for the same question, and each is valid against docs/answer.schema.json. The question is asked with the
real bundled model on the shared store, once through each face."""
from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from conftest import PDF_FACT_PAGE, PDF_QUESTION
from episodic_cli.api import ANSWER_SCHEMA_VERSION, Answer, PlanStep, Quote, SentenceEvidence, Source, Timings
from episodic_cli.engine.ask_plan import WAYS
from episodic_cli.app import app

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "answer.schema.json").read_text(encoding="utf-8"))
K = 1  # a short answer from one passage and its neighbours: the question is asked three times


def _properties(definition: dict) -> set[str]:
    """The properties a schema object names, those of the definitions it takes in with allOf too."""
    names = set(definition["properties"])
    for part in definition.get("allOf", []):
        names |= set(SCHEMA["$defs"][part["$ref"].rsplit("/", 1)[1]]["properties"])
    return names


def test_the_schema_names_every_field_of_the_answer_and_its_parts():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    fields = {f.name for f in dataclasses.fields(Answer)} | {"schema_version"}
    assert set(SCHEMA["required"]) == set(SCHEMA["properties"]) == fields
    assert SCHEMA["properties"]["schema_version"]["const"] == ANSWER_SCHEMA_VERSION
    records = {"quote": Quote, "sentence": SentenceEvidence, "source": Source, "timings": Timings, "plan_step": PlanStep}
    for name, record in records.items():
        assert _properties(SCHEMA["$defs"][name]) == {f.name for f in dataclasses.fields(record)}, name
    assert SCHEMA["$defs"]["plan_step"]["properties"]["way"]["enum"] == list(WAYS)  # the planner's ways, no other


def ask_cli(store_dir: Path) -> dict:
    result = CliRunner().invoke(app, ["ask", PDF_QUESTION, "--store", str(store_dir), "-k", str(K), "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def ask_api(store_dir: Path) -> dict:
    from episodic_cli import Archive

    with Archive(store_dir) as archive:
        return json.loads(json.dumps(archive.ask(PDF_QUESTION, k=K).as_json()))  # as a caller would send it


def ask_mcp(store_dir: Path) -> dict:
    """The ask tool's handler, called in this process as the server calls it for a client."""
    pytest.importorskip("mcp", reason="`epi mcp` needs the MCP SDK (pip install 'epi[mcp]'; ./install.sh does)")
    from episodic_cli.mcp_server import Engine, build_server

    engine = Engine(str(store_dir), None, None)
    try:
        engine.open()
        result = asyncio.run(build_server(engine).call_tool("ask", {"question": PDF_QUESTION, "k": K}))
    finally:
        engine.close()
    assert not result.is_error, result.content
    return result.structured_content


def test_epi_ask_json_the_api_and_the_mcp_tool_give_one_answer(shared_store, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    faces = {"epi ask --json": ask_cli(shared_store.store_dir), "Archive.ask": ask_api(shared_store.store_dir),
             "mcp ask": ask_mcp(shared_store.store_dir)}
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for face, answer in faces.items():
        assert not [e.message for e in validator.iter_errors(answer)], face
    cli = faces["epi ask --json"]
    assert cli["schema_version"] == ANSWER_SCHEMA_VERSION and cli["text"] and cli["question"] == PDF_QUESTION
    assert any(q["page_start"] == PDF_FACT_PAGE and "p. " in q["citation"] for q in cli["evidence"]), cli["evidence"]
    # the same fields and values, but the clock's: each face timed its own asking
    for face, answer in faces.items():
        assert set(answer["timings"]) == set(cli["timings"]), face
        assert {**answer, "timings": None} == {**cli, "timings": None}, face
