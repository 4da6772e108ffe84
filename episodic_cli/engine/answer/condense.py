"""Follow-ups in a conversation ("and how big is it on disk?") retrieved as the standalone question they mean: the
answer model rewrites them from the conversation (condense-question, as LangChain's history-aware retriever and
LlamaIndex's CondenseQuestionChatEngine do). The rewrite is only searched for; the model answers the question as
asked, with the conversation, and the user sees the rewrite (a drifted rewrite is visible, not silent).
"""
from __future__ import annotations

import re

import numpy as np

from ..budgets import MAX_QUESTION_CHARS
from ..llama.backend import LlamaModel, LlamaSession
from ..prompt import condense_messages

CONDENSE_CONTEXT = 2048  # the conversation's last turns and the follow-up; longer turns are cut from the front
CONDENSE_TOKENS = 64     # a question, not an answer
TURN_CHARS = 600         # of each earlier turn, the end is what a follow-up refers back to least: keep its start

# Words by which a follow-up points back into the conversation ("does it quote the value?").
_POINTS_BACK = re.compile(r"\b(?:it|its|he|she|him|her|his|they|them|their|that|this|these|those|there)\b", re.I)
# Openings by which a follow-up leaves out what it is about ("And with SHA-384?", "What if I deleted the branch?"). Not
# "why": a why-question names its subject as often as not, and a glued search also takes the last question's scope.
_ELLIPSIS = re.compile(r"^\W*(?:and|or|but|what if|what about|how about)\s", re.I)
CHAIN_QUESTIONS = 2  # earlier questions a glued search holds at most (chat keeps the last two turns)


def _continues(question: str) -> bool:
    return bool(_POINTS_BACK.search(question) or _ELLIPSIS.match(question))


def bare(text: str) -> str:
    """A question as compared with its rewrite: words only, in lower case."""
    return re.sub(r"\W+", " ", text).strip().lower()


def search_for(history: list[dict[str, str]], follow_up: str, rewrite: str) -> str:
    """What a follow-up is searched as: its rewrite, unless the model wrote none or gave the follow-up back while it
    still points back ("does it quote the value?") or leaves its subject out ("and with SHA-384?"). Then the last
    question asked comes first (after the one before it, when it continued that one) and the follow-up after it, so
    that the search holds what "it" names (the glued search `epi chat` used before the rewrite; docs/heldout.md,
    "Follow-ups"). The glued text also sets the scope and kind: "what does she do there?" after "summarise chapter
    3" stays in chapter 3."""
    if rewrite and bare(rewrite) != bare(follow_up):
        return rewrite
    if not _continues(follow_up):
        return follow_up
    # The last question, and before it each earlier one it pointed back to in turn ("And how do I remove it
    # again?" names its breakpoint only in the question before it).
    chain: list[str] = []
    for asked in reversed([m["content"] for m in history if m["role"] == "user"][-CHAIN_QUESTIONS:]):
        chain.insert(0, asked)
        if not _continues(asked):
            break
    return " ".join(chain + [follow_up])


class Condenser:
    """Rewrites follow-ups with its own small context, so the answer context's cached blocks stay as they are."""

    def __init__(self, model: LlamaModel, n_threads: int | None = None):
        self.model = model
        self.session = LlamaSession(model, n_ctx=min(CONDENSE_CONTEXT, model.info.n_ctx_train), n_threads=n_threads)
        self._prompt = np.zeros(0, dtype=np.int32)  # the tokens the cache holds: a prompt's instructions and examples

    def rewrite(self, history: list[dict[str, str]], follow_up: str) -> str:
        """The standalone question ("" when the model writes none)."""
        turns = [{"role": m["role"], "content": m["content"][:TURN_CHARS]} for m in history]
        room = self.session.n_ctx - CONDENSE_TOKENS
        while True:  # too long (dense scripts: a character a token): the oldest turns go, never the instructions
            prompt = self.model.apply_chat_template(condense_messages(turns, follow_up))
            tokens = np.asarray(self.model.tokenize(prompt, special=True), dtype=np.int32)
            if len(tokens) <= room or not turns:
                break
            turns = turns[1:]
        if len(tokens) > room:  # the follow-up alone does not fit: it is searched without a rewrite
            return ""
        # The instructions and worked examples open every prompt: they stay in the cache, and only what follows the
        # part shared with the last prompt is decoded (at least one token, for the logits).
        n = min(len(tokens), len(self._prompt)) - 1
        same = 0 if n < 1 else int(np.argmin(np.append(tokens[:n] == self._prompt[:n], False)))
        self.session.keep_first(same)
        self._prompt = tokens[:same]  # what the cache surely holds, should the prefill fail part-way
        pos = self.session.prefill(tokens[same:], same)
        self._prompt = tokens
        text = ""
        for piece in self.session.generate(pos, CONDENSE_TOKENS, lambda: "\n" in text):
            text += piece
        line = text.strip().split("\n")[0].strip().strip('"').strip()
        for prefix in ("Standalone question:", "Rewritten question:", "Question:"):
            if line.lower().startswith(prefix.lower()):
                line = line[len(prefix):].strip()
        return line[:MAX_QUESTION_CHARS]

    def close(self) -> None:
        self.session.close()
