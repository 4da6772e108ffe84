"""`epi mcp` as an MCP client meets it: the server started as a subprocess (`python -m episodic_cli mcp --store X`)
and driven over stdio with the official `mcp` client, on the shared store with the real bundled model. Tools,
answers with citations and evidence, errors with the CLI's one line (the server stays up), a waiting caller told
of its wait, outlines as resources, and nothing written to the store but KV blocks."""
from __future__ import annotations

import asyncio
import hashlib
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import PDF_FACT_PAGE, PDF_QUESTION, TEXT_FACT, TEXT_QUESTION
from episodic_cli.app import app

mcp = pytest.importorskip("mcp", reason="`epi mcp` needs the MCP SDK (pip install 'epi[mcp]'; ./install.sh does)")
from mcp import ClientSession, MCPError  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 600


KV_TIER = "kv"  # the one part of the store the server may write: answers keep KV blocks under the budget


def digest(store_dir: Path) -> dict[str, str]:
    """Every file of the store but the KV tier's, byte for byte: the database, the index, retrievals.log ..."""
    return {str(p.relative_to(store_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(store_dir.rglob("*")) if p.is_file() and p.relative_to(store_dir).parts[0] != KV_TIER}


def retrieval_lines(store_dir: Path) -> int:
    log = store_dir / "retrievals.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def server(store_dir: Path, home: Path) -> StdioServerParameters:
    # stdio_client passes only a few variables on: the store's home, the bundled model, and this checkout's code
    env = {"EPI_HOME": str(home), "EPI_MODEL": "smollm2",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return StdioServerParameters(command=sys.executable, args=["-m", "episodic_cli", "mcp", "--store",
                                                               str(store_dir)], env=env, cwd=str(ROOT))


def test_mcp_server_over_stdio(shared_store):
    store = shared_store.store_dir
    before, counted = digest(store), retrieval_lines(store)
    show_error = CliRunner().invoke(app, ["show", "987654", "--store", str(store)]).stderr.strip()
    empty_error = CliRunner().invoke(app, ["ask", "  ", "--store", str(store)]).stderr.strip()
    assert show_error.startswith("error: no event 987654") and empty_error == "error: the question is empty"

    async def session() -> None:
        async with stdio_client(server(store, shared_store.home)) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                await check_tools(s)
                await check_search(s, shared_store)
                await check_ask(s, shared_store)
                await check_errors(s, show_error, empty_error)
                await check_waiting(s)
                await check_outlines(s, shared_store)

    asyncio.run(asyncio.wait_for(session(), TIMEOUT_S))
    assert retrieval_lines(store) == counted, "the server's answers were counted in the store's retrievals.log"
    after = digest(store)
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    assert not changed, f"the server wrote to the store outside its KV tier: {changed}"


async def check_tools(s: ClientSession) -> None:
    tools = {t.name: t for t in (await s.list_tools()).tools}
    assert set(tools) == {"search", "ask", "read_event", "list_documents", "summary"}
    assert set(tools["ask"].input_schema["properties"]) == {"question", "doc", "read", "k", "answer_tokens"}
    assert set(tools["search"].input_schema["properties"]) == {"query", "k", "doc"}
    assert all(t.annotations and t.annotations.read_only_hint for t in tools.values())


async def check_search(s: ClientSession, shared_store) -> None:
    result = await s.call_tool("search", {"query": PDF_QUESTION, "k": 3})
    assert not result.is_error, result.content
    hits = result.structured_content["hits"]
    assert 1 <= len(hits) <= 3
    fact = [h for h in hits if "Orla Venn hid the brass key" in " ".join(h["text"].split())]
    assert fact and fact[0]["page_start"] <= PDF_FACT_PAGE <= fact[0]["page_end"]
    text = result.content[0].text
    assert f"{fact[0]['citation']} · event {fact[0]['event_id']}" in text  # the citation and id a model reads
    read = await s.call_tool("read_event", {"id": fact[0]["event_id"], "neighbours": 1})
    assert not read.is_error and fact[0]["text"].rstrip() in read.content[0].text
    assert [e["requested"] for e in read.structured_content["events"]].count(True) == 1
    only = await s.call_tool("search", {"query": PDF_QUESTION, "k": 2, "doc": shared_store.text.name})
    assert all(h["document"] == str(shared_store.text) for h in only.structured_content["hits"])


async def check_ask(s: ClientSession, shared_store) -> None:
    progress: list[tuple[float, str]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message or ""))

    result = await s.call_tool("ask", {"question": TEXT_QUESTION, "k": 1}, progress_callback=on_progress)
    assert not result.is_error, result.content
    answer = result.structured_content
    assert answer["text"] and answer["kind"] == "lookup" and answer["mode"] == "kv"
    cited = [src for src in answer["sources"] if TEXT_FACT in src["text"]]
    assert cited and cited[0]["document"] == str(shared_store.text) and cited[0]["line_start"] is not None
    assert answer["evidence"], answer
    for quote in answer["evidence"]:
        source = next(src for src in answer["sources"] if src["event_id"] == quote["event_id"])
        assert quote["quote"] in source["text"] and quote["citation"]  # the source's text exactly, its line breaks too
    text = result.content[0].text
    assert text.startswith(answer["text"]) and "Sources:" in text
    assert f"{cited[0]['citation']} · event {cited[0]['event_id']}" in text
    # the text a model reads squashes a quote's whitespace onto one line
    assert any(f"“{' '.join(q['quote'].split())}” ({q['citation']}, event {q['event_id']})" in text
               for q in answer["evidence"])
    # streamed: what the answer reads first, then its text growing through progress notifications to the answer
    status = [m for _, m in progress if m.startswith("epi: ")]
    streamed = [m for _, m in progress if not m.startswith("epi: ")]
    assert status and status[0].startswith("epi: reading ") and "tokens" in status[0], progress
    assert streamed and answer["text"].startswith(streamed[0].strip()) and streamed[-1].strip() == answer["text"]
    assert all(b.startswith(a) for a, b in zip(streamed, streamed[1:]))
    assert [d for d, _ in progress] == list(range(1, len(progress) + 1))


async def check_errors(s: ClientSession, show_error: str, empty_error: str) -> None:
    unknown = await s.call_tool("read_event", {"id": 987654})
    assert unknown.is_error and unknown.content[0].text == show_error
    empty = await s.call_tool("ask", {"question": "  "})
    assert empty.is_error and empty.content[0].text == empty_error
    nodoc = await s.call_tool("search", {"query": "key", "doc": "no-such-file.pdf"})
    assert nodoc.is_error and "matches no document" in nodoc.content[0].text
    nomap = await s.call_tool("summary", {})
    assert nomap.is_error and "epi map" in nomap.content[0].text
    # a number out of range is refused, not quietly moved into range (answer_tokens 0 gave a one-token answer)
    for tool, arguments in (("search", {"query": "key", "k": 0}), ("ask", {"question": "key?", "k": 99}),
                            ("ask", {"question": "key?", "answer_tokens": 0}),
                            ("read_event", {"id": 1, "neighbours": -1})):
        refused = await s.call_tool(tool, arguments)
        assert refused.is_error and "must be" in refused.content[0].text, (tool, arguments, refused.content)
    # still up: the next calls are answered
    docs = await s.call_tool("list_documents", {})
    assert not docs.is_error and len(docs.structured_content["documents"]) == 2


async def check_waiting(s: ClientSession) -> None:
    """A call that arrives while a question runs waits for it, and is told so."""
    started = asyncio.Event()
    told: list[str] = []

    async def on_ask(done: float, total: float | None, message: str | None) -> None:
        started.set()  # the first is what the answer reads: retrieval is done, prefill and generation to come

    async def on_search(done: float, total: float | None, message: str | None) -> None:
        told.append(message or "")

    ask = asyncio.create_task(s.call_tool("ask", {"question": PDF_QUESTION}, progress_callback=on_ask))
    await asyncio.wait_for(started.wait(), TIMEOUT_S)  # the answer is streaming: the model is busy
    search = await s.call_tool("search", {"query": "brass key", "k": 1}, progress_callback=on_search)
    assert not search.is_error and told, told
    assert told[0].startswith("epi: waiting for epi's model: question is running"), told
    assert told[1].startswith("epi: waited ") and "the search starts now" in told[1], told
    answered = await ask
    assert not answered.is_error and answered.structured_content["text"]


async def check_outlines(s: ClientSession, shared_store) -> None:
    docs = (await s.call_tool("list_documents", {})).structured_content["documents"]
    resources = {str(r.uri): r for r in (await s.list_resources()).resources}
    assert set(resources) == {f"epi://outline/{d['id']}" for d in docs}
    templates = [t.uri_template for t in (await s.list_resource_templates()).resource_templates]
    assert templates == ["epi://outline/{document_id}"]
    pdf = next(d for d in docs if d["name"] == str(shared_store.pdf))
    outline = (await s.read_resource(f"epi://outline/{pdf['id']}")).contents[0].text
    assert outline.splitlines()[0].startswith(f"{shared_store.pdf} (PDF, 5 pages") or \
        outline.splitlines()[0].startswith(str(shared_store.pdf)), outline
    # a document that is not there is "not found" (invalid params), not an internal error
    for missing in ("999999", "abc", str(10**30)):
        with pytest.raises(MCPError) as err:
            await s.read_resource(f"epi://outline/{missing}")
        assert err.value.code == -32602 and "no document" in err.value.message, err.value
