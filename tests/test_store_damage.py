"""Damage to a real store's files, made as a tester would from outside (bytes overwritten in place): every command
ends with one line or names the damage in `epi doctor`, and nothing stored is changed by finding it."""
from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import assert_one_line_error
from episodic_cli.app import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def flat(text: str) -> str:
    return " ".join(text.split())  # doctor's table wraps long cells


def copy_store(shared_store, tmp_path: Path) -> Path:
    """A private copy of the shared store with its WAL folded into the database file, so pages are where
    sqlite_master says."""
    store = tmp_path / "store"
    shutil.copytree(shared_store.store_dir, store)
    conn = sqlite3.connect(store / "store.sqlite3")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return store


def overwrite_page_header(store: Path, table: str) -> None:
    """12 bytes of 0xFF over the header of `table`'s root page (the damage of issue 30, 4(b))."""
    conn = sqlite3.connect(store / "store.sqlite3")
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(store / "store.sqlite3", "r+b") as f:
        f.seek((root - 1) * page_size + (100 if root == 1 else 0))
        f.write(b"\xff" * 12)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------------- a malformed database


def test_a_malformed_events_page_is_one_line_from_every_command_and_nothing_is_changed(shared_store, tmp_path):
    store = copy_store(shared_store, tmp_path)
    overwrite_page_header(store, "events")
    before = digest(store / "store.sqlite3")
    needles = (f"store '{store}' is damaged", "database disk image is malformed", "epi doctor")
    assert_one_line_error(invoke("show", "16", "--store", store), *needles)
    assert_one_line_error(invoke("ask", "Where is the key?", "--doc", "keeper.pdf", "--store", store), *needles)
    listed = invoke("ls", "--store", store, "--json")  # the documents table is intact: still listed
    assert listed.exit_code == 0, listed.output
    assert {Path(d["path"]).name for d in json.loads(listed.stdout)["documents"]} == {"keeper.pdf", "license-notes.txt"}
    for args in (["doctor", "--quick"], ["doctor", "--repair"]):
        result = invoke(*args, "--store", store)
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        out = flat(result.stdout)
        assert "the database file is damaged (database disk image is malformed)" in out, out
        assert "keeper.pdf: its events are unreadable" in out and "re-ingest the documents into --store NEW" in out
    assert "--repair does not rewrite a damaged database" in out
    assert digest(store / "store.sqlite3") == before  # finding the damage changed nothing


def test_a_malformed_documents_page_is_one_line_from_ls_and_doctor_says_what_is_unreadable(shared_store, tmp_path):
    store = copy_store(shared_store, tmp_path)
    overwrite_page_header(store, "documents")
    before = digest(store / "store.sqlite3")
    assert_one_line_error(invoke("ls", "--store", store), f"store '{store}' is damaged", "malformed")
    result = invoke("doctor", "--quick", "--store", store)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "the list of documents is unreadable" in flat(result.stdout)
    assert digest(store / "store.sqlite3") == before
