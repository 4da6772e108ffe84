"""A folder ingested again after files in it were removed or renamed, and `epi rm` of a name two stored documents
share (from a review of ingest as a user meets it). The ingest is real (the bundled reader)."""
from __future__ import annotations

from typer.testing import CliRunner

from conftest import prose_lines
from episodic_cli.app import app
from episodic_cli.store import Store

runner = CliRunner()


def _ingest(path, store) -> None:
    result = runner.invoke(app, ["ingest", str(path), "--store", str(store), "--answer-model", "none", "--no-map"])
    assert result.exit_code == 0, result.output


def _listed(store) -> list[str]:
    """The stored documents' own paths (`epi ls` shows the names they were ingested under)."""
    with Store.open_existing(store) as st:
        return sorted(d.path for d in st.documents())


def test_files_gone_from_a_folder_are_named_when_it_is_ingested_again(tmp_path):
    folder, store = tmp_path / "notes", tmp_path / "store"
    folder.mkdir()
    for name, seed in (("a.md", 1), ("b.md", 2), ("c.md", 3)):
        (folder / name).write_text("\n".join(prose_lines(seed, 12)) + "\n")
    _ingest(folder, store)
    (folder / "b.md").unlink()
    (folder / "c.md").rename(folder / "c2.md")
    again = runner.invoke(app, ["ingest", str(folder), "--store", str(store), "--answer-model", "none", "--no-map"])
    assert again.exit_code == 0, again.output
    said = " ".join(again.stderr.split())
    assert "2 stored documents from" in said and "b.md" in said and "c.md" in said and "`epi rm`" in said
    assert "c2.md" not in said.split("no longer there")[1]  # the new name was read, not called gone


def test_rm_of_a_name_two_documents_show_asks_which(tmp_path, monkeypatch):
    store = tmp_path / "store"
    for folder, seed in (("dA", 1), ("dB", 2)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "notes.md").write_text("\n".join(prose_lines(seed, 12)) + "\n")
        monkeypatch.chdir(tmp_path / folder)
        _ingest("notes.md", store)  # both show as "notes.md"
    both = _listed(store)
    assert len(both) == 2
    monkeypatch.chdir(tmp_path)
    refused = runner.invoke(app, ["rm", "notes.md", "--store", str(store)])
    assert refused.exit_code == 1 and "names 2 documents" in refused.stderr and _listed(store) == both
    monkeypatch.chdir(tmp_path / "dA")  # the file's own path decides (it removed dB's before)
    assert runner.invoke(app, ["rm", "notes.md", "--store", str(store)]).exit_code == 0
    assert _listed(store) == [str(tmp_path / "dB" / "notes.md")]
