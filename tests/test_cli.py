"""The `epi` CLI contract: JSON shapes, help, and bad inputs that end as one line on stderr with a non-zero exit and
no traceback. Commands run in-process through Typer's CliRunner (stdout and stderr captured apart), plus one run of
the real console entry point in a subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import TEXT_FACT, assert_one_line_error
from pdf_fixture import make_encrypted_pdf, make_pdf
from episodic_cli.app import app
from episodic_cli.store import Store

runner = CliRunner()


def invoke(*args: str, env: dict | None = None):
    return runner.invoke(app, [str(a) for a in args], env=env)


    return err


def failed_line(result, display: str) -> str:
    lines = [ln for ln in result.stderr.splitlines() if display in ln and "✗" in ln]
    assert len(lines) == 1, result.stderr
    return lines[0]


# ------------------------------------------------------------------------------------------- JSON contracts


def test_ask_json_contract(shared_ask):
    assert shared_ask.exit_code == 0, shared_ask.stderr
    assert len(shared_ask.stdout.strip().splitlines()) == 1  # exactly one JSON object, nothing else on stdout
    out = json.loads(shared_ask.stdout)
    assert set(out) == {"schema_version", "question", "text", "kind", "mode", "supported", "evidence", "sentences",
                        "sources", "timings", "short", "reading", "scope", "search", "left_out", "notes",
                        "first_answer", "narrowed", "retrieved_tokens", "kv_loaded_tokens", "kv_prefilled_tokens",
                        "layered", "left_out_tokens", "read_as_sentences", "plan"}
    assert out["schema_version"] == 1  # the form docs/answer.schema.json describes
    assert out["kind"] == "lookup" and out["reading"] is None and out["search"] is None  # test_whole_scope.py
    assert isinstance(out["sentences"], list)
    assert out["first_answer"] is None  # the bundled SmolLM2 reads narrowed sentences: no second look (test_second_look)
    assert isinstance(out["evidence"], list) and isinstance(out["supported"], bool)  # checked in test_evidence.py
    assert out["scope"] is None and out["notes"] == []  # the question names no chapter, page or file
    assert out["layered"] is None  # per-layer selection is off unless asked for (test_layered.py)
    assert [(s["way"], s["outcome"], s["why_not"]) for s in out["plan"]] == [("lookup", "answered", None)]
    # "What codename ...?" asks for a fact: the answer starts with an evidence span (test_short_answer.py)
    assert out["short"] and out["text"].startswith(out["short"])
    assert any(out["short"] in s["text"] for s in out["sources"])
    assert isinstance(out["text"], str) and out["text"] == out["text"].strip() and out["text"]
    assert out["mode"] == "kv"  # the default whenever the store has KV blocks (ingest stores them by default)
    assert isinstance(out["retrieved_tokens"], int) and not isinstance(out["retrieved_tokens"], bool)
    assert out["sources"]
    for s in out["sources"]:
        assert set(s) == {"number", "citation", "document", "event_id", "excerpt", "text", "section", "page_start",
                          "page_end", "line_start", "line_end", "score", "summary_of"}
        assert s["summary_of"] is None  # a lookup reads events; a summary of the map names what it covers
        assert (s["page_start"] is None) == (s["page_end"] is None)
        assert (s["page_start"] or 0) <= (s["page_end"] or 0)
        assert s["section"] is None or isinstance(s["section"], str)
        assert isinstance(s["document"], str) and isinstance(s["text"], str) and s["text"]
        assert isinstance(s["event_id"], int) and not isinstance(s["event_id"], bool)
        for key in ("page_start", "line_start", "line_end"):
            assert s[key] is None or (isinstance(s[key], int) and s[key] >= 1)
        assert (s["page_start"] is None) != (s["line_start"] is None)
        assert s["score"] is None or (isinstance(s["score"], float) and s["score"] > 0)
    assert any(TEXT_FACT in s["text"] for s in out["sources"])
    assert set(out["timings"]) == {"retrieve_s", "prefill_s", "first_token_s", "total_s", "progress_s"}
    t = out["timings"]
    assert t.pop("progress_s") is None  # nothing was prepared from text: no progress shown
    assert all(isinstance(v, float) and v >= 0 for v in t.values())
    assert 0 < t["retrieve_s"] <= t["first_token_s"] <= t["total_s"] and t["prefill_s"] > 0
    assert out["retrieved_tokens"] > 0
    # Narrowed (the default), the answer decodes a few sentences behind the cached sink and loads no block
    # (test_kv_mode.py checks, with --whole, that every retrieved token then loads from the blocks ingest kept).
    assert out["narrowed"]
    assert out["kv_loaded_tokens"] == 0 and out["kv_prefilled_tokens"] == 0


def test_ingest_json_one_object_per_document(shared_store):
    assert shared_store.ingest_exit_code == 0
    recs = shared_store.records()
    assert len(recs) == len(shared_store.ingest_stdout.strip().splitlines()) == 2
    for r in recs:
        assert set(r) == {"path", "tokens", "events", "seconds", "tokens_per_s", "status", "stage_seconds"}
        assert isinstance(r["path"], str) and r["status"] == "ingested"
        # the stages add up to the document's time, and the model's reading is among them
        stages = r["stage_seconds"]
        assert set(stages) == {"extract", "read", "embed", "commit"} and stages["read"] > 0
        assert sum(stages.values()) == pytest.approx(r["seconds"], abs=0.01)
        assert isinstance(r["tokens"], int) and isinstance(r["events"], int) and r["tokens"] > r["events"] > 0
        assert isinstance(r["seconds"], float) and r["seconds"] > 0
        assert r["tokens_per_s"] == pytest.approx(r["tokens"] / r["seconds"], rel=0.02)


def test_ls_and_show_json(shared_store):
    result = invoke("ls", "--store", shared_store.store_dir, "--json")
    assert result.exit_code == 0, result.output
    listing = json.loads(result.stdout)
    assert listing["store"] == str(shared_store.store_dir)
    assert sorted(d["path"] for d in listing["documents"]) == sorted([str(shared_store.pdf), str(shared_store.text)])
    pdf = next(d for d in listing["documents"] if d["kind"] == "pdf")
    assert pdf["pages"] == 5 and pdf["lines"] is None
    assert listing["n_documents"] == 2 and listing["n_events"] == sum(d["events"] for d in listing["documents"])

    with Store.open_existing(shared_store.store_dir) as st:
        doc = next(d for d in st.documents() if d.kind == "text")
        ev = st.events_of(doc.id)[1]
    result = invoke("show", ev.id, "--store", shared_store.store_dir, "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["event_id"] == ev.id and shown["text"] == ev.text and shown["ordinal"] == 1
    assert shown["document"] == str(shared_store.text)
    assert (shown["line_start"], shown["line_end"]) == (ev.line_start, ev.line_end)
    assert shown["tokens"] == ev.token_end - ev.token_start

    result = invoke("show", ev.id, "--store", shared_store.store_dir)  # human form prints the exact text
    assert result.exit_code == 0 and ev.text.strip() in result.stdout


def test_doctor_on_the_ingested_store(shared_store):
    result = invoke("doctor", "--store", shared_store.store_dir)
    assert result.exit_code == 0, result.output
    assert "FAIL" not in result.stdout
    flat = " ".join(result.stdout.split())  # the table wraps long cells at 80 columns
    assert "matches the embedder in use" in flat and "2 documents" in flat
    assert "blocks checked, all intact" in flat
    assert "kv block moves" in flat and "native: K is rotated" in flat  # the bundled model's RoPE is plain


def test_doctor_names_damaged_blocks_and_repair_removes_them(shared_store, tmp_path):
    import shutil

    from conftest import tier_block_paths

    store = tmp_path / "store"
    shutil.copytree(shared_store.store_dir, store)
    victim = tier_block_paths(store)[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    result = invoke("doctor", "--store", store)
    flat = " ".join(result.stdout.split())
    assert result.exit_code == 1 and "1 damaged block(s): event " in flat and "epi doctor --repair" in flat
    assert invoke("doctor", "--store", store, "--quick").exit_code == 0  # --quick does not read the blocks
    repaired = invoke("doctor", "--store", store, "--repair")
    assert repaired.exit_code == 0 and "removed 1 damaged block(s)" in " ".join(repaired.stdout.split())
    assert not victim.exists()
    after = invoke("doctor", "--store", store)
    assert after.exit_code == 0 and "all intact" in " ".join(after.stdout.split())


@pytest.mark.parametrize("cmd", [[], ["ingest"], ["ask"], ["chat"], ["ls"], ["show"], ["rm"], ["compact"], ["config"],
                                 ["doctor"]])
def test_help_exits_zero(cmd):
    result = invoke(*cmd, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage" in result.stdout


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout.startswith("epi ")


# ------------------------------------------------------------------------------------------------ units


@pytest.mark.parametrize("text,n_bytes", [("10GB", 10**10), ("500MB", 5 * 10**8), ("1.5GB", 15 * 10**8),
                                          ("2TB", 2 * 10**12), ("0", 0), ("3KiB", 3072), ("1GiB", 2**30)])
def test_sizes_are_read_in_decimal_units_binary_only_when_named(text, n_bytes):
    from episodic_cli.app import parse_size

    assert parse_size(text) == n_bytes


@pytest.mark.parametrize("n_bytes,shown", [(0, "0 B"), (999, "999 B"), (1000, "1 KB"), (12_244, "12.2 KB"),
                                           (10**10, "10 GB"), (9_300_000_000, "9.3 GB"), (5 * 10**8, "500 MB"),
                                           (2**30, "1.1 GB"), (10**13, "10 TB")])
def test_sizes_are_shown_in_decimal_units(n_bytes, shown):
    from episodic_cli import render

    assert render._size(n_bytes) == shown


def test_a_10gb_budget_is_shown_as_10_gb_and_is_the_default(tmp_path):
    """`--kv-budget 10GB` was shown as "9.3 GB": a 1024-based label on a 10^9 input (issue 35)."""
    from episodic_cli.store import StoreIdentity

    identity = StoreIdentity(embedder="all-MiniLM-L6-v2", embed_dim=384,
                             segmenter={"model_name": "m", "model_sha256": "a" * 64, "tokenizer_sha256": "b" * 64},
                             segmentation={"gamma": 1.0, "min_tokens": 16})
    Store.create_or_open(tmp_path / "st", identity).close()
    shown = invoke("config", "--store", tmp_path / "st")
    assert shown.exit_code == 0, shown.output
    assert "kv_budget_bytes: 10 GB" in shown.stdout  # the default budget is 10 GB too, not 10 GiB
    assert json.loads(invoke("config", "--store", tmp_path / "st", "--json").stdout)["kv_budget_bytes"] == 10**10
    changed = invoke("config", "--store", tmp_path / "st", "--kv-budget", "20GB")
    assert changed.exit_code == 0, changed.output
    assert "kv_budget_bytes: 20 GB" in changed.stdout


# ----------------------------------------------------------------------------------------------- bad inputs


def test_a_store_ingested_with_no_kv_keeps_no_blocks_and_still_answers_in_kv_mode(tmp_path):
    doc = tmp_path / "note.txt"
    doc.write_text("The ferry to Orsk leaves at nine. The harbour master keeps the keys.\n" * 8)
    store = tmp_path / "textonly"
    assert invoke("ingest", doc, "--store", store, "--no-kv").exit_code == 0
    assert list((store / "kv").glob("*/blocks/*/*")) == []
    assert json.loads(invoke("ls", "--store", store, "--json").stdout)["kv_budget_bytes"] == 0
    default = json.loads(invoke("ask", "When does the ferry leave?", "--store", store, "--json").stdout)
    assert default["mode"] == "text"  # a budget of 0: text mode by default
    result = invoke("ask", "When does the ferry leave?", "--store", store, "--mode", "kv", "--json", "--whole")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)  # kv mode prepares every event from text in place and keeps nothing
    assert out["mode"] == "kv" and out["kv_loaded_tokens"] == 0 and out["kv_prefilled_tokens"] > 0
    assert list((store / "kv").glob("*/blocks/*/*")) == []


@pytest.mark.parametrize("command,option,values", [("ask", "--mode", ["text", "kv"]),
                                                    ("ingest", "--kv-type", ["f16", "q8_0", "q4_0"]),
                                                    ("ingest", "--refine", ["modularity", "conductance", "none"])])
def test_options_with_fixed_values_list_them_in_help_and_refuse_others_in_one_line(command, option, values, tmp_path):
    """--mode, --kv-type and --refine were checked by hand, so --help did not list their values (issue 35)."""
    shown = invoke(command, "--help", env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    line = next(ln for ln in shown.stdout.splitlines() if option in ln)
    assert f"<{'|'.join(values)}>" in line, line
    args = [command, "anything?"] if command == "ask" else [command, tmp_path / "missing.txt"]
    err = assert_one_line_error(invoke(*args, option, "fast"), f"'{option}'", "'fast' is not one of",
                                *(f"'{v}'" for v in values), f"epi {command} --help", code=2)
    assert "Value error" not in err
    for value in values:  # every listed value is still accepted (the command then fails for its own reason)
        result = invoke(*args, option, value, "--store", tmp_path / "no-store")
        assert "is not one of" not in result.output and result.exit_code == 1, result.output


def test_other_bad_values_end_in_one_line_too():
    assert_one_line_error(invoke("ask", "anything?", "-k", "0"), "'-k'", code=2)
    assert_one_line_error(invoke("ask", "anything?", "--threads", "many"), "'--threads'", code=2)


def test_encrypted_pdf_fails_alone_and_others_are_ingested(tmp_path):
    locked = make_encrypted_pdf(tmp_path / "locked.pdf", ["The secret page text."], "hunter2")
    good = tmp_path / "good.txt"
    good.write_text("The tide tables were kept in the harbour office. " * 6 + "\n", encoding="utf-8")
    store = tmp_path / "store"
    result = invoke("ingest", locked, good, "--store", store)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    assert "encrypted" in failed_line(result, str(locked))
    listing = json.loads(invoke("ls", "--store", store, "--json").stdout)
    assert [d["path"] for d in listing["documents"]] == [str(good)]


@pytest.mark.parametrize(
    "name,content,needle",
    [
        ("corrupt.pdf", b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 9 0 R >>\nendobj\ntrailer\n<<>>\n%%EOF\n"
         + bytes(range(256)) * 4, "not a readable PDF"),
        ("blob.txt", b"abc\x00\x01\x02\xff" * 200, "binary file"),
        ("empty.md", b"  \n\n", "is empty"),
    ],
)
def test_bad_file_fails_with_one_line(tmp_path, name, content, needle):
    bad = tmp_path / name
    bad.write_bytes(content)
    result = invoke("ingest", bad, "--store", tmp_path / "store", "--json")
    assert result.exit_code == 1
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    rec = json.loads(result.stdout)  # one JSON object, with the reason on one line
    assert rec["status"] == "failed" and needle in rec["error"] and "\n" not in rec["error"]
    assert set(rec) == {"path", "tokens", "events", "seconds", "tokens_per_s", "status", "error"}
    # The same failure in human form: one ✗ line naming the file and the reason.
    result = invoke("ingest", bad, "--store", tmp_path / "store")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert needle in failed_line(result, str(bad))


def test_nonexistent_path(tmp_path):
    missing = tmp_path / "nope.txt"
    result = invoke("ingest", missing, "--store", tmp_path / "store")
    assert result.exit_code == 1 and "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if str(missing) in ln and "no such file" in ln]
    assert len(lines) == 1, result.stderr


def test_unknown_model_files(tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text("Some words to ingest.\n", encoding="utf-8")
    assert_one_line_error(invoke("ingest", doc, "--model", "/nonexistent.gguf", "--store", tmp_path / "s"),
                          "model file not found: /nonexistent.gguf")
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"this is not a model" * 10)
    assert_one_line_error(invoke("ingest", doc, "--model", fake, "--store", tmp_path / "s"), "is not a GGUF model file")
    assert_one_line_error(invoke("ask", "q?", "--model", "/nonexistent.gguf"), "no store at")  # store checked first


def test_min_tokens_above_max_tokens(tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text("Some words.\n", encoding="utf-8")
    assert_one_line_error(invoke("ingest", doc, "--min-tokens", "300", "--max-tokens", "200"), "--min-tokens")


def test_ask_ls_show_on_missing_store(tmp_path):
    missing = tmp_path / "no-such-store"
    assert_one_line_error(invoke("ask", "anything?", "--store", missing), f"no store at {missing}")
    assert_one_line_error(invoke("ls", "--store", missing), "no store at")
    assert_one_line_error(invoke("show", "1", "--store", missing), "no store at")
    # The default store of a fresh EPI_HOME does not exist either.
    assert_one_line_error(invoke("ask", "anything?"), "no store at", "epi ingest")


def test_show_unknown_event_and_rm_unknown_document(shared_store):
    assert_one_line_error(invoke("show", "987654", "--store", shared_store.store_dir), "no event 987654")
    result = invoke("rm", "not/a/document.txt", "--store", shared_store.store_dir)
    assert_one_line_error(result, "not in the store: not/a/document.txt")
    with Store.open_existing(shared_store.store_dir) as st:
        assert st.stats()["n_documents"] == 2


def test_invalid_store_name():
    assert_one_line_error(invoke("ls", "--store", "bad name!"), "invalid store name")


def test_real_console_script_prints_no_traceback(tmp_path):
    """The real entry point, stderr piped (not a terminal): one unwrapped line, exit 1, no traceback."""
    missing = tmp_path / ("a-store-path-long-enough-that-a-wrapped-line-would-show" * 2)
    env = {**os.environ, "EPI_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-m", "episodic_cli", "ask", "anything?", "--store", str(missing)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no store at ") and str(missing) in lines[0], proc.stderr

    pdf = make_pdf(tmp_path / "x.pdf", ["hello"])  # an existing file passed as --model: not GGUF
    proc = subprocess.run([sys.executable, "-m", "episodic_cli", "ingest", str(pdf), "--model", str(pdf)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"error: {pdf} is not a GGUF model file (llama.cpp models end in .gguf)"]


def test_a_second_writer_is_refused_at_once_before_the_model_loads(tmp_path, monkeypatch):
    from filelock import FileLock

    from episodic_cli.engine import workspace

    doc = tmp_path / "note.txt"
    doc.write_text("The ferry to Orsk leaves at nine.\n" * 8)
    store = tmp_path / "store"
    store.mkdir()
    with FileLock(store / "lock"):  # what a running `epi ingest` holds
        monkeypatch.setattr(workspace.Workspace, "model", property(lambda self: pytest.fail("model loaded")))
        result = invoke("ingest", doc, "--store", store)
    assert_one_line_error(result, "another epi process", "is writing store")


def test_a_reader_that_leaves_early_is_not_a_failure(shared_store):
    """`epi ls --json | head`: Click turned the broken pipe into exit 1, and epi's own handler into an error line."""
    env = {**os.environ, "EPI_HOME": str(shared_store.home)}
    proc = subprocess.Popen([sys.executable, "-m", "episodic_cli", "ls", "--store", str(shared_store.store_dir),
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # the reader is gone before epi writes
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and not err.strip(), err


@pytest.mark.parametrize("options, said", [
    (["--epman", "--mode", "text"], "--epman weights KV blocks"),
    (["--layered", "--narrow"], "--layered reads its pool's blocks whole"),
    (["--layered", "--read", "whole"], "works on a lookup's retrieved blocks"),
])
def test_options_that_cannot_run_together_are_refused_before_the_model_loads(shared_store, options, said):
    """They were checked only once the model had loaded: with a model file that is not there, the model's error
    came first."""
    result = runner.invoke(app, ["ask", "who kept the key?", "--store", str(shared_store.store_dir),
                                 "--model", "/nonexistent/model.gguf", *options])
    assert result.exit_code == 1 and said in result.stderr and "model file" not in result.stderr, result.stderr


def test_read_whole_on_a_question_naming_no_part_says_it_answered_a_lookup(shared_store):
    result = runner.invoke(app, ["ask", "who kept the brass key?", "--store", str(shared_store.store_dir),
                                 "--read", "whole", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kind"] == "lookup" and "--read whole reads the part" in result.stderr
