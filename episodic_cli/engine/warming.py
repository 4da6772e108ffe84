"""Preparing the answer model's blocks ahead of questions: `epi warm` (the events most retrieved first, until the KV
budget is full) and `epi chat`'s prefetch of what a follow-up would likely read. Functions of a Workspace (its model,
answerers and tier), kept out of it so that the front door stays a front door.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..store import Store
from .answer.kv_mode import event_block_key
from .answer.prefetch import likely_next as events_likely_next
from .answer.prefetch import retrieved_event
from .budgets import WARM_RUN_TOKENS
from .retrieval.retrieve import RetrievedEvent

if TYPE_CHECKING:
    from .workspace import Workspace


@dataclass
class WarmResult:
    events_to_do: int = 0   # events whose block the tier lacked
    tokens_to_do: int = 0
    events_kept: int = 0    # blocks written
    tokens_done: int = 0
    seconds: float = 0.0
    stopped: str | None = None  # why it stopped before the end

    def as_json(self) -> dict:
        return {**self.__dict__, "seconds": round(self.seconds, 1)}


def _warm_runs(events: list[RetrievedEvent | None]) -> list[list[RetrievedEvent]]:
    """`epi warm`'s runs: consecutive events of about WARM_RUN_TOKENS, prefilled together; None ends a run."""
    runs: list[list[RetrievedEvent]] = []
    run: list[RetrievedEvent] = []
    run_tokens = 0
    for r in events:
        if run and (r is None or run_tokens + r.n_tokens > WARM_RUN_TOKENS):
            runs.append(run)
            run, run_tokens = [], 0
        if r is not None:
            run.append(r)
            run_tokens += r.n_tokens
    if run:
        runs.append(run)
    return runs


def warm(ws: Workspace, store: Store, progress: Callable[[int, int], None] | None = None,
         documents: set[str] | None = None) -> WarmResult:
    """Prepare this model's block for every event whose block its tier lacks, in runs of such events in document
    order, the runs most retrieved by earlier questions first, until the KV budget is full: what a question would
    otherwise read from text first (store/retrieval_log.py counts what questions retrieved). Resumable: what is
    kept stays, and a rerun skips it. `progress(tokens done, tokens to do)`; `documents`: only these (their paths
    as stored)."""
    if not ws.keeps_blocks:  # nothing to prepare: every question re-reads its events
        return WarmResult(stopped=f"{ws.model.info.name} keeps no KV blocks ({ws.text_only_reason})")
    answerer = ws.answerer("kv", store)
    keeper = answerer.keeper
    asked = store.retrieval_counts()
    asked_runs: list[list[RetrievedEvent]] = []
    other_runs: list[list[RetrievedEvent]] = []
    for doc in store.documents():
        if documents is not None and doc.path not in documents:
            continue
        asked_events: list[RetrievedEvent | None] = []  # None between asked-for events that are not neighbours
        other_events: list[RetrievedEvent] = []
        for ev in store.events_of(doc.id):
            r = RetrievedEvent(ev, doc, None, None)
            if keeper.has(event_block_key(r)):
                asked_events.append(None)
            elif asked.get(ev.id):
                asked_events.append(r)
            else:
                asked_events.append(None)
                other_events.append(r)
        asked_runs += _warm_runs(asked_events)
        other_runs += _warm_runs(other_events)
    # the most retrieved first (a stable sort: document order among equals), then the rest in document order
    asked_runs.sort(key=lambda run: -max(asked[r.event.id] for r in run))
    todo = asked_runs + other_runs
    total = sum(r.n_tokens for run in todo for r in run)
    result = WarmResult(events_to_do=sum(len(run) for run in todo), tokens_to_do=total)
    started = time.perf_counter()
    done = 0
    for run in todo:
        if progress is not None:
            progress(done, total)
        before = keeper.kept
        answerer.prepare(run)
        result.events_kept += keeper.kept - before
        done += sum(r.n_tokens for r in run)
        if keeper.refused:  # the budget (or the disk) is full: later runs would be refused too
            result.stopped = "the KV budget is full"
            break
    if progress is not None:
        progress(done, total)
    result.tokens_done, result.seconds = done, time.perf_counter() - started
    return result

def likely_next(ws: Workspace, store: Store, read: list[RetrievedEvent]) -> list[int]:
    """The events a follow-up to an answer that read `read` would likely read, lacking this model's blocks
    (engine/answer/prefetch.py): what `epi chat` prepares while the user types."""
    if not ws.keeps_blocks:
        return []
    keeper = ws.block_keeper(store)
    return events_likely_next(store, [r for r in read if r.summary is None], lambda r: keeper.has(event_block_key(r)))

def prefetch(ws: Workspace, store: Store, event_ids: list[int], should_stop: Callable[[], bool] | None = None) -> int:
    """Prepare the blocks of `event_ids` in order, one event at a time, until `should_stop()` or the KV budget
    is full; the events prepared."""
    if not ws.keeps_blocks:
        return 0
    answerer = ws.answerer("kv", store)
    prepared = 0
    for event_id in event_ids:
        if should_stop is not None and should_stop():
            break
        event = retrieved_event(store, event_id)
        if event is None or answerer.keeper.has(event_block_key(event)):
            continue
        answerer.prepare([event])
        prepared += 1
        if answerer.keeper.refused:
            break
    return prepared
