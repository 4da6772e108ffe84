"""How a question is answered, decided before anything is read: `plan` turns a request's choices, what it searches
for, its parsed scope and what the store's catalogue says (`Catalogue`) into a `Plan`, the ways of reading to try in
order, each with why it is there and when it gives way to the next. Pure: no model, no store, no retrieval, so
tests/test_ask_plan.py checks it on plain data; engine/ask_run.py walks the plan and records which step answered.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .ask_options import AskOptions
from .retrieval.question_kind import QuestionKind, asks_each_part, classify
from .retrieval.scope import Scope

__all__ = ["Catalogue", "Plan", "Step", "WAYS", "plan", "seeks_named_whole"]

# The ways of reading a step may name (engine/ask_run.py has one function for each).
WAYS = ("each_part", "whole", "named_whole", "overview", "explain", "lookup")

WHOLE_NAMES_NOTHING = ("--read whole reads the part a question names, and this one names no chapter, section, page, "
                       "file or symbol found in the archive; answered from the best passages instead")


@dataclass(frozen=True)
class Catalogue:
    """What the store and the model say that the plan depends on, gathered before planning: `named`, the document
    or folder the question names as a whole (engine/retrieval/named_whole.py; None: none, or not looked for);
    `has_map`, whether the store holds any summaries (`epi map`); `reads_whole_parts`, the answer model's size rule
    (Workspace.reads_whole_parts: a small model looks every question up unless --read asks)."""

    named: str | None = None
    has_map: bool = False
    reads_whole_parts: bool = True


@dataclass(frozen=True)
class Step:
    """One way of reading: `way` (one of WAYS), `reason` why the plan tries it, `gives_way` when it finds nothing to
    read and the next step is tried; `skipped`: why it is not tried at all (the catalogue already says it would
    find nothing); `warning`: said once the walk reaches it."""

    way: str
    reason: str
    gives_way: str | None = None
    skipped: str | None = None
    warning: str | None = None


@dataclass(frozen=True)
class Plan:
    """The ways to try, in order (the last, a lookup, always answers). `kind`: what the question asks for, as the
    planner judged it (or --read said); `named`: the document or folder the question names as a whole, if any;
    `boost`: it is searched within, its opening ranked first, instead of being read by a step of its own."""

    kind: QuestionKind
    steps: tuple[Step, ...]
    boost: bool = False
    named: str | None = None

    @property
    def ways(self) -> tuple[str, ...]:
        return tuple(s.way for s in self.steps)

    def outcomes(self, answered: int | None) -> list[dict[str, str | None]]:
        """Each step with what became of it once step `answered` (an index; None: not walked yet) answered:
        "answered", "gave way" (with why), "skipped" (with why) or "not tried"."""
        out = []
        for n, s in enumerate(self.steps):
            if answered is None or n > answered:
                outcome, why = "not tried", None
            elif n == answered:
                outcome, why = "answered", None
            elif s.skipped:
                outcome, why = "skipped", s.skipped
            else:
                outcome, why = "gave way", s.gives_way
            out.append({"way": s.way, "reason": s.reason, "outcome": outcome, "why_not": why})
        return out


def seeks_named_whole(options: AskOptions, parsed: Scope, titled: bool) -> bool:
    """Whether the store is asked for a document or folder the question names as a whole ("what does epi do?"):
    only when the question may be read whole or from the map, and names no place of its own (a chapter, a quoted
    title: it goes by the place); --layered and --epman work on a lookup's blocks."""
    return options.kind in (None, QuestionKind.OVERVIEW, QuestionKind.WHOLE) \
        and not (options.layered or options.epman or parsed.structural or titled)


def _kind(search: str, options: AskOptions, parsed: Scope, titled: bool, catalogue: Catalogue, boost: bool
          ) -> tuple[QuestionKind, str]:
    """What the question asks for, and why it is judged so."""
    if options.kind is not None:
        return options.kind, f"--read {options.kind.value}"
    if options.layered or options.epman:
        return QuestionKind.LOOKUP, f"--{'layered' if options.layered else 'epman'} works on a lookup's blocks"
    if not catalogue.reads_whole_parts:
        return QuestionKind.LOOKUP, "the answer model is too small to gain from reading a part whole or the map"
    # "the tenacity package" names the folder found as a whole, not the files scope.py guesses from the word
    kind = classify(search, replace(parsed, files=[]) if boost and parsed.files else parsed, titled)
    return kind, f"the question asks {_ASKS[kind]}"


# What a question of each kind asks for, as a plan's reason says it (engine/retrieval/question_kind.py judges it).
_ASKS = {QuestionKind.LOOKUP: "for a fact or a passage", QuestionKind.WHOLE: "about a part as a whole",
         QuestionKind.OVERVIEW: "about a document or the archive as a whole", QuestionKind.EXPLAIN: "for an explanation"}


def plan(search: str, options: AskOptions, parsed: Scope, titled: bool, catalogue: Catalogue) -> Plan:
    """The steps today's answers take, in the order they are tried: `search` is what retrieval looks for (the
    question, or a follow-up's rewrite), `parsed` its scope (retrieval.scope.parse) and `titled` whether a quoted
    title in it named a heading."""
    # A named whole, no --read: found as before, within it, its own opening ranked first (it is not read whole)
    boost = catalogue.named is not None and options.kind is None
    named = None if boost else catalogue.named
    kind, why = _kind(search, options, parsed, titled, catalogue, boost)
    lookup = Step("lookup", "the best passages and their neighbours, read in relevance order"
                  if kind is QuestionKind.LOOKUP else "the fallback: the best passages")
    read_named = Step("named_whole", f"{named} is named as a whole: read as far as the context holds",
                      gives_way="none of it could be read")
    steps: list[Step] = []
    if kind is QuestionKind.WHOLE:
        if asks_each_part(search):
            steps.append(Step("each_part", f"{why}, about each part of the part it names: the map's summaries of "
                              "its sections, in order", gives_way="the map has no summaries of its sections"))
        steps.append(Step("whole", f"{why}: the part it names, read in document order as far as the context holds",
                          gives_way="it names no part that resolved to events"))
        if named is not None:
            steps.append(read_named)
        if options.kind is QuestionKind.WHOLE:  # asked for, not chosen: say why it is not done
            lookup = replace(lookup, warning=WHOLE_NAMES_NOTHING)
    elif kind is QuestionKind.OVERVIEW:
        reason = f"{why}: the map's summaries{f' of {named}' if named else ''}, most general first"
        if catalogue.has_map:
            steps.append(Step("overview", reason, gives_way="the map holds no summary of it"))
        else:
            steps.append(Step("overview", reason, skipped="the store has no map yet", warning=(
                f"this store has no map yet, so a question about {named or 'the whole'} is answered from "
                f"{'as much of it as the context holds' if named else 'a few passages'}; "
                "`epi map` writes the summaries such questions read")))
        if named is not None:  # no map of it yet: the named whole itself, as far as it fits
            steps.append(read_named)
    elif kind is QuestionKind.EXPLAIN:
        steps.append(Step("explain", f"{why}: the definitions or sections its best passages sit in, read whole",
                          gives_way="no passage matched it"))
    else:
        lookup = replace(lookup, reason=f"{why}: {lookup.reason}")
    steps.append(lookup)
    if boost:  # every step reads within it; said once, on the first
        steps[0] = replace(steps[0], reason=f"{steps[0].reason} (within {catalogue.named}, its opening ranked first)")
    return Plan(kind, tuple(steps), boost=boost, named=catalogue.named)
