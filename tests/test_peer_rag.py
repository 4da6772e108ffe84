"""bench/answers/peer_rag.py's peers chunk with the libraries' own splitters (the `peer` extra), not an imitation."""
import sys
from pathlib import Path

import pytest

pytest.importorskip("langchain_text_splitters")
pytest.importorskip("llama_index.core")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench" / "answers"))
import peer_rag  # noqa: E402

TEXT = "\n\n".join(f"Paragraph {i}. " + "The hook caller calls every plugin in turn. " * 12 for i in range(12))


def test_langchain_chunks_are_the_splitters():
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    chunks = peer_rag.langchain_chunks([{"path": "a.txt", "text": TEXT}])
    expected = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200).split_text(TEXT)
    assert [c["text"] for c in chunks] == expected and len(expected) > 3
    assert all(len(c["text"]) <= 1000 for c in chunks)
    assert chunks[1]["start"] == TEXT.index(chunks[1]["text"])


def test_llamaindex_chunks_are_the_default_sentence_splitter():
    from llama_index.core.node_parser import SentenceSplitter

    text = TEXT * 4
    chunks = peer_rag.llamaindex_chunks([{"path": "a.txt", "text": text}])
    assert SentenceSplitter().chunk_size == 1024 and len(chunks) > 1
    assert all(c["text"] in text for c in chunks)
    assert chunks[0]["context"].startswith("file_path: a.txt")  # the metadata the model is shown, as the library shows it


def test_prompts():
    from llama_index.core.prompts.default_prompts import DEFAULT_TEXT_QA_PROMPT_TMPL

    hits = [{"context": "one"}, {"context": "two"}]
    assert peer_rag.peer_prompt("langchain", "Q?", hits).endswith("Question: Q? \nContext: one\n\ntwo \nAnswer:")
    assert peer_rag.peer_prompt("llamaindex", "Q?", hits) == DEFAULT_TEXT_QA_PROMPT_TMPL.format(
        context_str="one\n\ntwo", query_str="Q?")
