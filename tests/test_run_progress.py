"""The whole run's progress (run_progress.py): files and tokens done, a total that is known for the files
reached and estimated from size for the others, the run's own rate, and a time left that follows both."""
from __future__ import annotations

import pytest

from episodic_cli.run_progress import DEFAULT_TOKENS_PER_BYTE, RunProgress


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_total_is_estimated_from_sizes_until_files_are_reached():
    clock = Clock()
    run = RunProgress({"a.txt": 4000, "b.txt": 8000, "c.pdf": 100_000}, clock)
    ratio = DEFAULT_TOKENS_PER_BYTE
    assert run.estimated
    assert run.tokens_total == round(4000 * ratio["text"]) + round(8000 * ratio["text"]) + round(100_000 * ratio["pdf"])
    assert run.tokens_per_s is None and run.seconds_left is None

    run.document_started("a.txt", 2000, 0)  # 0.5 tokens per byte: b.txt is now expected to hold 4,000
    assert run.tokens_total == 2000 + 4000 + round(100_000 * ratio["pdf"])
    run.tokens_done(500)  # the first batch starts the clock
    clock.now += 10
    run.tokens_done(1000)
    clock.now += 10
    run.tokens_done(500)
    assert run.tokens_per_s == pytest.approx(1500 / 20)
    run.document_finished("a.txt", 2000)
    assert (run.files_done, run.files_total, run.tokens_completed) == (1, 3, 2000)
    assert run.seconds_left == pytest.approx((run.tokens_total - 2000) / 75)


def test_unchanged_files_leave_the_estimate_and_resumed_tokens_count_as_done_but_not_as_speed():
    clock = Clock()
    run = RunProgress({"old.txt": 10_000, "long.txt": 40_000}, clock)
    run.document_finished("old.txt", 0)  # unchanged: nothing to read
    run.document_started("long.txt", 10_000, resumed_at=6_000)
    assert not run.estimated and run.tokens_total == 10_000 and run.tokens_completed == 6_000
    run.tokens_done(512)
    clock.now += 4
    run.tokens_done(512)
    assert run.tokens_per_s == pytest.approx(128)
    assert run.seconds_left == pytest.approx((10_000 - 6_000 - 1024) / 128)
