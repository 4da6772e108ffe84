"""How the map's summary requests name a document (engine/answer/map_writer.py, short_name): the model takes
whatever name it is given for the document's title."""
from episodic_cli.engine.answer.map_writer import short_name
from episodic_cli.store.records import DocumentRecord


def _doc(path: str, kind: str) -> DocumentRecord:
    return DocumentRecord(path=path, display_path=path, kind=kind, content_sha256="0" * 64, n_tokens=1, n_events=1,
                          n_pages=None, n_lines=1, ingest_seconds=0.0)


def test_a_code_file_is_named_with_its_folder():
    assert short_name(_doc("/home/ana/src/dotenv/main.py", "code")) == "dotenv/main.py"


def test_a_book_is_named_by_its_file_alone_not_its_folder():
    assert short_name(_doc("/home/ana/heldout-docs/pp100k.txt", "text")) == "pp100k.txt"
    assert short_name(_doc("C:/Users/ana/Downloads/novel.pdf", "pdf")) == "novel.pdf"
