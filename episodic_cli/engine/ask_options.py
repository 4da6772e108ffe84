"""The choices one question is answered with: `epi ask`'s options as one frozen record, with `epi ask`'s defaults,
that refuses a combination which cannot run in one line saying what to do. Variations: dataclasses.replace.

Not in the record, by design: what changes with every call rather than being chosen, and what outlives a question.
The conversation so far (`history`), the standalone question a follow-up is searched as (`search`) and the caller's
stop signal (`should_stop`) are passed beside it to Workspace.ask; the layered pool's size (`--pool`) is the
Workspace's `layered_pool`, since it sizes an answerer kept between questions. Plain engine module: no model, no
store.
"""
from __future__ import annotations

from dataclasses import dataclass

from .budgets import COLD_PREFILL_SECONDS, DEFAULT_K, LAYER_BUDGET, POOL_TOKENS_RANGE, SECOND_LOOK
from .errors import EpiError
from .retrieval.question_kind import QuestionKind

MODES = ("text", "kv")


@dataclass(frozen=True)
class AskOptions:
    """`k`: events found by similarity, before `neighbours` (adjacent events) are added around each hit.
    `mode`: "kv" loads the events' stored KV blocks, "text" re-reads their text (None: kv unless the store keeps no
    blocks, Workspace.default_mode). `docs`: globs on the documents' paths (`--doc`) retrieval is restricted to.
    `narrow`: read only the sentences that match the question best (None: as the model reads best,
    Workspace.narrows_by_default). `short`: a question asking for a fact is answered with the evidence span the model
    finds likeliest first (engine/answer/short_answer.py). `layered`: kv mode with per-layer block selection from a
    larger pool (engine/answer/layered.py). `epman`: kv mode scales each block's V rows by its episodic weight in
    [0.9, 1.0]. `cold_seconds`: kv mode reading whole events prefills at most what this machine reads in that time of
    the events the answer model has no block for yet; the least relevant are left out (None or 0: no limit).
    `kind`: how much to read (None: as the question asks, engine/retrieval/question_kind.py).
    `answer_tokens`: the answer stops after at most this many tokens (None, or more than the path's own limit:
    ANSWER_TOKENS for a lookup, WHOLE_ANSWER_TOKENS for a part read whole or the map). `second_look`: a lookup read
    from whole blocks whose answer no sentence of the sources holds is answered again from the passages that match
    the question best (Workspace._second_look).

    A `mode` of None is checked against the kv-only choices once the store fills it in (Workspace.resolve)."""

    k: int = DEFAULT_K
    mode: str | None = None
    neighbours: int = 1
    docs: tuple[str, ...] | None = None
    narrow: bool | None = None
    short: bool = True
    layered: bool = False
    epman: bool = False
    cold_seconds: float | None = COLD_PREFILL_SECONDS
    kind: QuestionKind | None = None
    answer_tokens: int | None = None
    second_look: bool = SECOND_LOOK

    def __post_init__(self) -> None:
        if self.docs is not None:
            # A list of globs is kept as a tuple, so that the record stays immutable; no glob at all means every
            # document, as None does.
            object.__setattr__(self, "docs", tuple(self.docs) or None)
        problem = self._problem()
        if problem is not None:
            raise EpiError(problem)

    def _problem(self) -> str | None:
        """What is wrong with this combination, in one line saying what to do (None: it can run)."""
        if self.k < 1:
            return "-k must be at least 1"
        if self.neighbours < 0:
            return "--neighbours must be 0 or more"
        if self.mode is not None and self.mode not in MODES:
            return f"unknown mode {self.mode!r}: use text or kv"
        if self.answer_tokens is not None and self.answer_tokens < 1:
            return "the answer's token limit must be at least 1"
        if self.cold_seconds is not None and self.cold_seconds < 0:
            return "--cold-seconds must be 0 (no limit) or more"
        if self.epman and self.mode == "text":
            return "--epman weights KV blocks, so it needs kv mode (a store ingested with KV blocks)"
        if self.layered and self.mode == "text":
            return "--layered selects KV blocks per layer, so it needs kv mode (a store with KV blocks)"
        if self.layered and self.narrow:
            return "--layered reads its pool's blocks whole (each layer picks its own); leave out --narrow"
        if (self.layered or self.epman) and self.kind not in (None, QuestionKind.LOOKUP):
            return (f"--{'layered' if self.layered else 'epman'} works on a lookup's retrieved blocks, not on "
                    f"--read {self.kind.value}; leave one of them out")
        return None


def check_pool(pool: int | None, layered: bool) -> None:
    """`--pool` (the layered pool's size in tokens, which lives on the Workspace, not in AskOptions): only with
    --layered, and within POOL_TOKENS_RANGE. `epi ask`, `epi chat` and Archive.ask all check it here."""
    if pool is not None and not layered:
        raise EpiError("--pool sizes the pool of --layered answers; add --layered, or leave --pool out")
    low, high = POOL_TOKENS_RANGE
    if pool is not None and not low <= pool <= high:
        raise EpiError(f"--pool {pool}: a layered pool holds {low:,}-{high:,} tokens (each layer sees "
                       f"{LAYER_BUDGET:,} of them, so a smaller pool leaves nothing to choose); leave --pool out for "
                       "the default, what the answer context holds")
