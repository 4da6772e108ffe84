"""Whether the quote found for an answer sentence states it: the answer model reads the quote and the sentence and
is asked yes or no. The per-sentence evidence (retrieval/evidence.py) finds quotes by shared words and meaning,
and an act given to the wrong person shares both with its source; measured on three held-out sets, this check
doubts far more of the sentences a reader found unstated than of those found stated (docs/heldout.md, "Evidence
sentence by sentence: the answer model checks each quote").
"""
from __future__ import annotations

import numpy as np

from ..llama.backend import LlamaModel, LlamaSession

CHECK_CONTEXT = 2048   # the prompt, a sentence and its (at most two) quotes, each cut to CHECK_CHARS
CHECK_CHARS = 1500
CHECK_SYSTEM = "You check a claim against a source text. Answer only yes or no."
CHECK_ASK = ("Source:\n{source}\n\nClaim: {claim}\n\nDoes the source state this claim, with the same people, acts and "
             "facts? Answer yes or no.")
# A sentence is doubted below this probability of "yes" (over yes and no): the even point, fixed before any run.
STATED_AT = 0.5
CHECKING_PARAMS = 1_000_000_000  # smaller answer models do not check (the bundled SmolLM2 is 135M; never measured)
MAX_CHECKED = 12  # sentences checked per answer: an each-part answer may run to 40, a second each


_MARK = "\x1e"  # where the source and the claim go in the rendered template (its own text never holds it)


class ClaimChecker:
    """Asks the answer model, in a small context of its own, whether quotes state a sentence."""

    def __init__(self, model: LlamaModel, n_threads: int | None = None):
        self.model = model
        self.session = LlamaSession(model, n_ctx=min(CHECK_CONTEXT, model.info.n_ctx_train), n_threads=n_threads)
        self._yes = sorted({int(model.tokenize(w)[0]) for w in ("yes", "Yes", " yes", " Yes")})
        self._no = sorted({int(model.tokenize(w)[0]) for w in ("no", "No", " no", " No")})
        # The prompt around the source and the claim, tokenized once: the same for every sentence.
        head, rest = model.apply_chat_template([
            {"role": "system", "content": CHECK_SYSTEM},
            {"role": "user", "content": CHECK_ASK.format(source=_MARK, claim=_MARK)}]).split(_MARK, 1)
        self._frame = [model.tokenize(t, special=True) for t in (head, *rest.split(_MARK, 1))]
        self._room = self.session.n_ctx - 1 - sum(len(t) for t in self._frame)

    def p_stated(self, sentence: str, quotes: list[str]) -> float:
        """The model's probability that the quotes state the sentence: its next-token logits for yes against no.
        Document text is tokenized as text (a control token in it is not one), and a prompt longer than the context
        (dense scripts, minified lines) keeps its end: the claim and the question."""
        claim = self.model.tokenize(sentence[:CHECK_CHARS])[-max(self._room // 2, 1):]
        source = self.model.tokenize("\n".join(q[:CHECK_CHARS] for q in quotes))[-max(self._room - len(claim), 1):]
        head, middle, tail = self._frame
        tokens = np.concatenate([head, source, middle, claim, tail]).astype(np.int32)
        self.session.clear()
        self.session.prefill(tokens)
        logits = self.session.last_logits()
        yes, no = float(logits[self._yes].max()), float(logits[self._no].max())
        return float(1.0 / (1.0 + np.exp(no - yes)))

    def close(self) -> None:
        self.session.close()
