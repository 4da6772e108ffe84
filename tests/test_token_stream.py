"""Ingest's per-token arrays hold a window of the document (sliding_array.py), and its tokens come from the text in
chunks (token_stream.py): chunked tokenization must give exactly the whole text's tokens, character offsets and
clean-cut marks, on real text nobody on the team wrote, with the bundled tokenizer (GPT-2 style BPE) and the tiny
model's (SentencePiece style), from the start and from a resumed position."""
from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import pytest

from conftest import license_text
from episodic_cli.engine.ingest.segment import clean_cut_mask
from episodic_cli.engine.ingest.sliding_array import SlidingArray
from episodic_cli.engine.ingest.token_offsets import token_char_offsets
from episodic_cli.engine.ingest.token_stream import DocumentTokens, next_cut, tokenizer_kind
from tiny_gguf import write_tiny_model

# -------------------------------------------------------------------------------------------------- SlidingArray


def test_sliding_array_reads_like_the_whole_array_inside_its_window():
    rng = np.random.default_rng(7)
    n = 50_000
    whole = np.zeros(n, dtype=np.float32)
    window = SlidingArray(n, np.float32)
    released = 0
    for start in range(0, n, 700):  # written in batches, read back behind, released further behind
        values = rng.random(min(700, n - start), dtype=np.float32)
        whole[start : start + len(values)] = values
        window[start : start + len(values)] = values
        lo = max(released, start - 1500)
        assert np.array_equal(window[lo : start + len(values)], whole[lo : start + len(values)])
        picks = rng.integers(lo, start + len(values), 20)
        assert np.array_equal(window[picks], whole[picks]) and window[int(picks[0])] == whole[picks[0]]
        released = max(released, start - 1000)
        window.release_before(released)
    assert len(window) == n and window.nbytes <= 4 * 8192  # the live span, not the document


def test_sliding_array_refuses_released_positions_and_reads_unwritten_as_zero():
    window = SlidingArray(100, np.int64)
    window[10:20] = np.arange(10)
    window.release_before(15)
    with pytest.raises(IndexError):
        window[14]
    with pytest.raises(IndexError):
        window[10:16]
    assert window[15:20].tolist() == [5, 6, 7, 8, 9] and window[90] == 0
    with pytest.raises(IndexError):
        window[100]


def test_sliding_array_calls_its_producer_before_reads():
    asked = []
    window = SlidingArray(10, np.int32, fill_to=asked.append)
    window[2:5]
    window[np.array([7, 3])]
    window[9]
    window[1:1]
    assert asked == [5, 8, 10, 1]


# -------------------------------------------------------------------------------------------- chunked tokenizing


def real_text(limit_chars: int = 400_000) -> str:
    """Python standard library modules (code, docstrings, comments) and the Apache licence: about 100k tokens."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    parts = [license_text()]
    for name in ("argparse.py", "typing.py", "textwrap.py", "difflib.py", "email/message.py", "json/decoder.py",
                 "pydoc_data/topics.py"):
        path = lib / name
        if path.is_file():
            parts.append(path.read_text(encoding="utf-8"))
    return "\n".join(parts)[:limit_chars]


def whole_text_arrays(model, text: str):
    tokens = model.tokenize(text)
    pieces = [model.pieces()[t] for t in tokens]
    if tokenizer_kind(model) == "space_prefix":  # the first token holds a space that is not in the text
        return tokens, np.maximum(token_char_offsets(" " + text, pieces) - 1, 0), clean_cut_mask(pieces)
    return tokens, token_char_offsets(text, pieces), clean_cut_mask(pieces)


def assert_chunked_equals_whole(model, text: str, chunk_chars: int, resume_at: int | None = None):
    tokens, offsets, clean = whole_text_arrays(model, text)
    counted: list[tuple[int, int]] = []
    chunked = DocumentTokens(model, text, chunk_chars=chunk_chars, on_count=lambda *a: counted.append(a))
    assert len(chunked.chunks) > 10  # many seams
    # the counting pass reports each chunk: characters counted, rising to the whole text
    assert [c[0] for c in counted] == [c.char_end for c in chunked.chunks] and counted[-1] == (len(text), len(text))
    assert len(chunked) == len(tokens)
    first = 0
    if resume_at is not None:
        chunked.start_at(resume_at)
        first = resume_at
    n = len(tokens)
    for a in range(first, n, 997):  # read ahead in batches, release behind, as the ingest pass does
        b = min(a + 997, n)
        assert np.array_equal(chunked.tokens[a:b], tokens[a:b]), a
        assert np.array_equal(chunked.offsets[a:b], offsets[a:b]), a
        assert np.array_equal(chunked.clean[a:b], clean[a:b]), a
        chunked.release_before(max(a - 500, first))
    assert chunked.offsets[n] == len(text) and chunked.clean[n]
    # Held: at most twice (the buffers double) a chunk plus the batches read and kept, at 13 bytes a token (int32 id,
    # int64 offset, bool mark), not the document's.
    starts = [c.token_start for c in chunked.chunks] + [n]
    largest_chunk = max(b - a for a, b in zip(starts, starts[1:]))
    assert chunked.nbytes <= 2 * 13 * (largest_chunk + 2 * 997 + 500) < 13 * n / 3


@pytest.fixture(scope="module", params=[False, True], ids=["no-space-prefix", "space-prefix"])
def tiny_model(tmp_path_factory, request):
    from episodic_cli.engine.llama.backend import LlamaModel

    model = LlamaModel(write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny.gguf", space_prefix=request.param))
    assert tokenizer_kind(model) == ("space_prefix" if request.param else "exact")
    yield model
    model.close()


def test_chunked_tokenization_equals_the_whole_text_with_the_bundled_tokenizer(bundled_model):
    assert tokenizer_kind(bundled_model) == "exact"
    text = real_text()
    assert_chunked_equals_whole(bundled_model, text, chunk_chars=4096)
    assert_chunked_equals_whole(bundled_model, text, chunk_chars=4096, resume_at=31_337)


def test_chunked_tokenization_equals_the_whole_text_with_a_sentencepiece_tokenizer(tiny_model):
    text = real_text(150_000)
    assert_chunked_equals_whole(tiny_model, text, chunk_chars=4096)
    assert_chunked_equals_whole(tiny_model, text, chunk_chars=4096, resume_at=20_001)


def test_cuts_fall_on_line_starts_then_word_starts_then_anywhere():
    lines = "alpha beta\ngamma\n\n  delta\nepsilon zeta\n"
    assert next_cut(lines, 0, "exact", target=3) == lines.index("gamma")
    assert next_cut(lines, 0, "exact", target=12) == lines.index("epsilon")  # not after a blank line or indent
    assert next_cut("alphabet soup", 0, "exact", target=2) == len("alphabet")  # no line start: a word start
    assert next_cut("x" * 100, 0, "exact", target=10, limit=40) == 40  # neither: cut anyway
    assert next_cut(lines, 0, "space_prefix", target=3) == lines.index(" beta")
    assert next_cut(lines, 0, "other", target=3) == len(lines)
