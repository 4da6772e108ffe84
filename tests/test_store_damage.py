"""Damage to a real store's files, made as a tester would from outside (bytes overwritten in place): every command
ends with one line or names the damage in `epi doctor`, and nothing stored is changed by finding it."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import struct
from pathlib import Path

import numpy as np
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


# ------------------------------------------------------------------------------------------ the dense index


def damage_index(path: Path) -> tuple[int, int, int]:
    """Swap the labels of the first two elements of an hnswlib file and negate the third's vector: same size, same
    label set (issue 30, 3). Returns the three labels."""
    import struct

    data = bytearray(path.read_bytes())
    offset_level0, _, count, per_element, label_offset, data_offset = struct.unpack_from("<6Q", data, 0)
    assert count >= 3
    dim = (label_offset - data_offset) // 4
    base = 96 + offset_level0  # the header (6 size_t, int, uint32, 3 size_t, double, size_t) is 96 bytes

    def at(i: int, field: int) -> int:
        return base + i * per_element + field

    labels = [struct.unpack_from("<Q", data, at(i, label_offset))[0] for i in range(3)]
    struct.pack_into("<Q", data, at(0, label_offset), labels[1])
    struct.pack_into("<Q", data, at(1, label_offset), labels[0])
    vec = np.frombuffer(bytes(data[at(2, data_offset) : at(2, data_offset) + 4 * dim]), dtype=np.float32)
    data[at(2, data_offset) : at(2, data_offset) + 4 * dim] = (-vec).tobytes()
    path.write_bytes(bytes(data))
    return labels[0], labels[1], labels[2]


def nearest_to_own_vectors(store: Path, ids) -> list[int]:
    """For each event, the event the store's dense search finds nearest its own embedding (itself when intact)."""
    from episodic_cli.store import Store

    with Store.open_existing(store) as st:
        _, vectors = st._vectors_of(list(ids))
        return [st.search_dense(v, 1)[0][0] for v in vectors]


def test_a_damaged_index_with_the_same_labels_is_named_by_doctor_and_repair_rebuilds_it(shared_store, tmp_path):
    """An index saved by an older epi, without its sum: doctor compares its vectors with SQLite's."""
    store = copy_store(shared_store, tmp_path)
    (store / "index.hnsw.crc32").unlink()
    swapped = damage_index(store / "index.hnsw")
    assert nearest_to_own_vectors(store, swapped) != list(swapped)  # the damage changes what a question finds
    for quick in ([], ["--quick"]):
        result = invoke("doctor", *quick, "--store", store)
        out = flat(result.stdout)
        assert result.exit_code == 1, out
        assert "3 of" in out and "differ from the embeddings in SQLite" in out and "epi doctor --repair" in out, out
        assert all(f"event {i} of " in out for i in swapped), out
    assert "(a random sample: --quick)" in out
    repaired = invoke("doctor", "--quick", "--repair", "--store", store)
    assert repaired.exit_code == 0 and "rebuilt it from SQLite" in flat(repaired.stdout), repaired.stdout
    assert nearest_to_own_vectors(store, swapped) == list(swapped)
    after = invoke("doctor", "--quick", "--store", store)
    assert after.exit_code == 0 and "match the embeddings in SQLite" in flat(after.stdout)


def test_an_index_that_differs_from_its_sum_is_not_loaded_but_rebuilt_and_named(shared_store, tmp_path):
    """The same damage to an index saved with its sum (index.hnsw.crc32): refused on open, so no search ever reads
    it; the store rebuilds it from SQLite and doctor names it."""
    store = copy_store(shared_store, tmp_path)
    assert (store / "index.hnsw.crc32").is_file()
    swapped = damage_index(store / "index.hnsw")
    result = invoke("doctor", "--quick", "--store", store)
    out = flat(result.stdout)
    assert result.exit_code == 1 and "dense index (index.hnsw) was damaged (its links or checksum are wrong); rebuilt " \
        "it from SQLite" in out, out
    assert nearest_to_own_vectors(store, swapped) == list(swapped)
    assert invoke("doctor", "--quick", "--store", store).exit_code == 0


def break_a_link(path: Path) -> None:
    """Point the entry element's first level-0 link far outside the index, as a random swap did in the damage
    campaign (bench/faults/damage.py): hnswlib loads such a file and the next search dies with a segmentation fault."""
    data = bytearray(path.read_bytes())
    per_element, entry = struct.unpack_from("<Q", data, 24)[0], struct.unpack_from("<I", data, 52)[0]
    at = 96 + entry * per_element
    struct.pack_into("<I", data, at, 1)  # one link...
    struct.pack_into("<I", data, at + 4, 0x7FFFFFF0)  # ...to an element that does not exist
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("with_sum", [True, False])
def test_an_index_with_a_broken_link_answers_instead_of_crashing(shared_store, tmp_path, with_sum):
    import subprocess
    import sys

    from conftest import TEXT_QUESTION

    store = copy_store(shared_store, tmp_path)
    if not with_sum:  # an older epi's index: its links are checked all the same
        (store / "index.hnsw.crc32").unlink()
    break_a_link(store / "index.hnsw")
    env = dict(os.environ, EPI_HOME=str(shared_store.home))
    asked = subprocess.run([sys.executable, "-m", "episodic_cli", "ask", TEXT_QUESTION, "--store", str(store),
                            "--json", "-k", "3"], capture_output=True, text=True, env=env, timeout=600)
    assert asked.returncode == 0, (asked.returncode, asked.stderr[-2000:])  # was -11 (SIGSEGV)
    got = json.loads(asked.stdout)
    assert got["text"].strip() and got["sources"]
    assert (store / "index.hnsw.crc32").is_file()  # rebuilt from SQLite and saved with its sum


# ------------------------------------------------------------------------------------ an event's text altered


def xor_event_text(store: Path, event_id: int, snippet: str) -> None:
    """XOR 32 bytes of `snippet` where the events table holds it (issue 30, 4(a)): the page stays well-formed, so
    SQLite reads the altered text without complaint. The file also holds the text in the lexical index's tables;
    each place is tried and put back until the event's own row is the one changed."""
    db = store / "store.sqlite3"
    data = bytearray(db.read_bytes())
    needle = snippet.encode("utf-8")[:32]
    assert len(needle) == 32
    at = data.find(needle)
    while at >= 0:
        for i in range(32):
            data[at + i] ^= 0x01  # ASCII stays ASCII: the cell still decodes
        db.write_bytes(bytes(data))
        conn = sqlite3.connect(db)
        text = conn.execute("SELECT text FROM events WHERE id = ?", (event_id,)).fetchone()[0]
        conn.close()
        if snippet not in text:
            return
        for i in range(32):
            data[at + i] ^= 0x01
        db.write_bytes(bytes(data))
        at = data.find(needle, at + 1)
    raise AssertionError("the event's text was not found in the database file")


def test_an_event_whose_text_was_altered_in_place_is_named_and_ingesting_its_document_again_restores_it(
        shared_store, tmp_path):
    from conftest import TEXT_FACT, TEXT_QUESTION
    from episodic_cli.store import Store

    store = copy_store(shared_store, tmp_path)
    with Store.open_existing(store) as st:
        [doc] = [d for d in st.documents() if d.path == str(shared_store.text)]
        [event] = [e for e in st.events_of(doc.id) if TEXT_FACT in e.text]
        n_events = st.stats()["n_events"]
    xor_event_text(store, event.id, TEXT_FACT)
    conn = sqlite3.connect(store / "store.sqlite3")
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]  # SQLite sees nothing wrong
    conn.close()

    named = (f"event {event.id} of {doc.display_path} is damaged", "no longer matches its checksum", "again")
    assert_one_line_error(invoke("show", event.id, "--store", store), *named)
    # Only the damaged event retrieved: nothing left to answer from, so the ask refuses in one line naming it.
    assert_one_line_error(invoke("ask", TEXT_QUESTION, "--store", store, "-k", "1", "--neighbours", "0"), *named)
    # Other events retrieved too: the answer comes from them and the damaged one is named on stderr, in one line.
    asked = invoke("ask", TEXT_QUESTION, "--store", store, "-k", "3", "--json")
    assert asked.exit_code == 0, asked.output
    warned = [ln for ln in asked.stderr.splitlines() if ln.strip()]
    assert len(warned) == 1 and warned[0].startswith("warning: left out of this answer: "), asked.stderr
    assert all(n in warned[0] for n in (*named, "epi doctor")), warned[0]
    got = json.loads(asked.stdout)
    assert got["text"].strip() and got["sources"]
    assert event.id not in {s["event_id"] for s in got["sources"]}
    result = invoke("doctor", "--quick", "--store", store)
    out = flat(result.stdout)
    assert result.exit_code == 1 and f"1 damaged event(s), their text or place altered: event {event.id} of" in out

    again = invoke("ingest", shared_store.text, "--store", store, "--answer-model", "none", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["status"] == "ingested"  # read again, not skipped as unchanged
    with Store.open_existing(store) as st:
        assert st.damaged_events() == [] and st.stats()["n_events"] == n_events
        assert any(TEXT_FACT in e.text for d in st.documents() for e in st.events_of(d.id))
    after = invoke("doctor", "--quick", "--store", store)
    assert after.exit_code == 0 and f"all {n_events:,} events match their checksums" in flat(after.stdout)


def test_a_store_written_before_checksums_gets_them_on_open_and_then_catches_damage(shared_store, tmp_path):
    from conftest import TEXT_FACT
    from episodic_cli.store import EventDamagedError, Store

    store = copy_store(shared_store, tmp_path)
    conn = sqlite3.connect(store / "store.sqlite3")  # the store as epi wrote it before migration m008
    conn.execute("ALTER TABLE events DROP COLUMN checksum")
    conn.execute("DELETE FROM _migrations WHERE name = 'm008_event_checksums'")
    conn.commit()
    conn.close()
    with Store.open_existing(store) as st:
        assert st.damaged_events() == []
        [event] = [e for d in st.documents() for e in st.events_of(d.id) if TEXT_FACT in e.text]
    xor_event_text(store, event.id, TEXT_FACT)
    with Store.open_existing(store) as st:
        with pytest.raises(EventDamagedError):
            st.get_events([event.id])
        assert [event_id for event_id, _ in st.damaged_events()] == [event.id]
