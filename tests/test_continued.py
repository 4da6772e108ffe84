"""`epi ask --continue`'s conversation between commands (episodic_cli/continued.py): one per store, even for store
paths that differ only in punctuation, kept by its owner only, and a chain of follow-ups kept to its start."""
from __future__ import annotations

import os
import stat

from episodic_cli import continued


def _pair(question: str, answer: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


def test_each_store_keeps_its_own_conversation(tmp_path, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(tmp_path / "home"))
    stores = [tmp_path / "x_y", tmp_path / "x" / "y", tmp_path / "x y"]  # one file name before, by punctuation
    for n, store in enumerate(stores):
        store.mkdir(parents=True)
        continued.remember(store, _pair(f"What is cat {n} called?", f"Cat {n} is called Tam."))
    for n, store in enumerate(stores):
        assert continued.last_turns(store) == _pair(f"What is cat {n} called?", f"Cat {n} is called Tam.")
    assert continued.last_turns(tmp_path / "never-asked") is None
    kept = list((tmp_path / "home" / "data" / "conversations").iterdir())
    assert len(kept) == 3 and all(stat.S_IMODE(os.stat(p).st_mode) == 0o600 for p in kept)


def test_a_chain_of_follow_ups_keeps_the_last_two_pairs(tmp_path, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(tmp_path / "home"))
    turns = _pair("How do I set a breakpoint?", "With b.") + _pair("And remove it?", "With d.")
    continued.remember(tmp_path, turns + _pair("All at once?", "With D."))
    assert continued.last_turns(tmp_path) == turns[2:] + _pair("All at once?", "With D.")


def test_an_unreadable_or_foreign_file_is_no_conversation(tmp_path, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(tmp_path / "home"))
    continued.remember(tmp_path, _pair("Q?", "A."))
    (path,) = (tmp_path / "home" / "data" / "conversations").iterdir()
    path.write_text('{"store": "/elsewhere", "turns": [{"role": "user", "content": "Q?"}]}')
    assert continued.last_turns(tmp_path) is None
    path.write_text("{half")
    assert continued.last_turns(tmp_path) is None
