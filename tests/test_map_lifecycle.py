"""The map as documents change under it (engine/answer/map_writer.py, store/summaries.py): a folder's summary is not
read once its documents changed and is removed once the folder makes no collection; a document's summaries under
keys its plan no longer makes (an earlier map cut it otherwise) are removed; a document removed while `epi map`
runs is skipped, not a crash. The ingest and store are real; the summariser is a stub (what is tested is the
store's bookkeeping, not what a model writes; the real model writes maps in test_whole_scope and test_map_kill)."""
from __future__ import annotations

import numpy as np
from typer.testing import CliRunner

from conftest import prose_lines
from episodic_cli.app import app
from episodic_cli.engine.answer.map_writer import MapWriter
from episodic_cli.engine.retrieval.summary_sources import overview
from episodic_cli.store import Store
from episodic_cli.store.summaries import COLLECTION, collection_key

runner = CliRunner()


class StubSummariser:
    """Writes "<tag>: N sources" for any request ("" for the tag "silent"); `before_each` runs first (failure
    injection)."""

    def __init__(self, tag: str, before_each=lambda: None):
        self.tag, self.before_each = tag, before_each

    def stream(self, request, retrieved, history, started, answer, max_tokens=None, should_stop=None):
        self.before_each()
        answer.text = "" if self.tag == "silent" else f"{self.tag}: {len(retrieved)} sources"
        yield answer.text


def _embed(dim: int):
    def embed(text: str) -> np.ndarray:
        v = np.random.default_rng(sum(map(ord, text)) % 2**32).normal(size=dim).astype(np.float32)
        return v / np.linalg.norm(v)
    return embed


def _map(st: Store, tag: str, room: int = 20000, before_each=lambda: None):
    return MapWriter(st, StubSummariser(tag, before_each), tag, _embed(st.identity.embed_dim), room=room).run()


def _folder(tmp_path):
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.md").write_text("# Tides\n\n" + "\n".join(prose_lines(1, 30)) + "\n")
    (docs / "sub" / "b.md").write_text("# Bread\n\n" + "\n".join(prose_lines(2, 30)) + "\n")
    (docs / "sub" / "c.md").write_text("# Tomatoes\n\n" + "\n".join(prose_lines(3, 30)) + "\n")
    store = tmp_path / "store"
    result = runner.invoke(app, ["ingest", str(docs), "--store", str(store), "--no-kv", "--json"])
    assert result.exit_code == 0, result.output
    return docs, store


def test_a_folders_summary_follows_its_documents_and_a_recut_map_leaves_no_old_parts(tmp_path):
    docs, store = _folder(tmp_path)
    with Store.open_existing(store) as st:
        _map(st, "A", room=120)  # a small context: the documents are read in chunks
        chunked = {s.key for s in st.summaries().all() if '"chunk"' in s.key}
        assert chunked and {s.level for s in st.summaries().all(COLLECTION)} == {COLLECTION}
        folders = {s.key for s in st.summaries().all(COLLECTION)}
        assert collection_key(f"{docs}/sub/") in folders
        _map(st, "B")  # room for every part whole: the chunks' summaries go
        assert {s.model for s in st.summaries().all()} == {"B"}
        assert not chunked & {s.key for s in st.summaries().all()}
    assert runner.invoke(app, ["rm", str(docs / "sub" / "b.md"), "--store", str(store)]).exit_code == 0
    with Store.open_existing(store) as st:
        read = overview(st, _embed(st.identity.embed_dim)("q"), "what is in this archive?", 24000)
        assert not [s for s in read if s.level == COLLECTION]  # both folders' documents changed since
        _map(st, "B")
        # the sub-folder holds one document now: no collection; the top folder is written again from its two
        assert {s.key for s in st.summaries().all(COLLECTION)} == {collection_key(f"{docs}/")}
        read = overview(st, _embed(st.identity.embed_dim)("q"), "what is in this archive?", 24000)
        assert [s.key for s in read if s.level == COLLECTION] == [collection_key(f"{docs}/")]


def test_a_document_removed_while_the_map_runs_is_skipped(tmp_path):
    docs, store = _folder(tmp_path)
    with Store.open_existing(store) as st:
        victim = next(d for d in st.documents() if d.display_path.endswith("c.md"))

        def remove_once():  # an `epi rm` between two summaries
            if any(d.id == victim.id for d in st.documents()):
                st.remove_document(victim.path)

        progress = _map(st, "A", before_each=remove_once)
        assert progress.stopped is None
        assert not st.summaries().of_document(victim.id)
        assert {d.display_path for d in st.documents()} == {str(docs / "a.md"), str(docs / "sub" / "b.md")}


def test_parts_the_model_wrote_nothing_for_are_not_called_up_to_date(tmp_path, capsys):
    from episodic_cli import render

    _, store = _folder(tmp_path)
    with Store.open_existing(store) as st:
        progress = _map(st, "silent")
        assert progress.written == 0 and progress.missed == 3 and not st.summaries().count()
    render.map_summary(progress)
    said = " ".join(capsys.readouterr().err.split())
    assert "up to date" not in said and "3 parts got no summary" in said and "run `epi map` again" in said
