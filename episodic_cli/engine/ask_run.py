"""The executor of a question's plan (engine/ask_plan.py): `answer_question` parses the scope once, asks the store
what the planner needs, plans, and walks the plan's steps in order until one finds something to read; each way of
reading is a function of the question's `Asking` context. `AskResult` is what it returns beside the answer stream, with
the plan and the step that answered in it.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..store import Store
from .answer.claim_check import MAX_CHECKED, STATED_AT
from .answer.kv_mode import KVModeAnswerer, event_block_key
from .answer.records import Answer, SecondLook
from .answer.short_answer import answer_spans, asks_for_a_fact
from .ask_options import AskOptions
from .ask_plan import Catalogue, Plan, plan, seeks_named_whole
from .budgets import (ANSWER_TOKENS, EVERY_PART_ANSWER_TOKENS, EVERY_PART_LINE_TOKENS, EVIDENCE_BUDGET,
                      LAYERED_ANCHOR_TOKENS, LAYERED_POOL_K, MAX_POOL, NAMED_OPENING_TOKENS, OVERVIEW_CHARS,
                      PROMPT_OVERHEAD, QUESTION_ROOM, SECOND_LOOK_TOKENS, WHOLE_ANSWER_TOKENS)
from .errors import EpiError
from .llama import prefill_rate
from .llama.backend import default_threads
from .prompt import each_section_request, overview_request, whole_scope_request
from .retrieval import cold_reading
from .retrieval.evidence import SentenceSupport, Support, readable, support, support_by_sentence
from .retrieval.evidence import narrow as evidence_narrow
from .retrieval.named_whole import NamedWhole, named_whole, opening_document
from .retrieval.question_kind import QuestionKind, asks_each_part
from .retrieval.retrieve import RetrievedEvent, relevance_order
from .retrieval.scope import Restriction, Scope, documents_matching, package_globs
from .retrieval.scope import parse as parse_scope
from .retrieval.scope import resolve as resolve_scope
from .retrieval.summary_sources import overview as overview_summaries
from .retrieval.summary_sources import summary_sources
from .retrieval.weights import episodic_weights
from .retrieval.whole_scope import enclosing, read_scope, read_sections

if TYPE_CHECKING:
    from .workspace import Workspace

Found = tuple["AskResult", Iterator[str]]


@dataclass
class AskResult:
    question: str
    mode: str
    retrieved: list[RetrievedEvent]
    answer: Answer
    scope: Restriction | None = None  # the chapter/section/page/file/--doc the question was restricted to
    focus: list[tuple[int, list[tuple[int, int]]]] | None = None  # the sentences the answer read (evidence.narrow)
    # retrieved events left out because the answer model has no block for them yet and reading them from text would
    # take longer than the question may (fit_cold)
    left_cold: list[RetrievedEvent] = field(default_factory=list)
    # of the events read, those without a block read only as passages that match the question, for the same reason
    cold_passages: list[RetrievedEvent] = field(default_factory=list)
    kind: QuestionKind = QuestionKind.LOOKUP  # how much the answer read (engine/retrieval/question_kind.py)
    reading: str | None = None  # what a whole-scope or overview answer read: "read all of ch. 12, 7,930 tokens"
    search: str | None = None   # what retrieval looked for, when not the question (a chat follow-up's rewrite)
    embed: Callable[[str], object] | None = None  # the question encoder, for evidence by meaning (support_by_sentence)
    # (sentence, quotes) -> the answer model's probability that the quotes state it (answer/claim_check.py), or
    # None when it could not be checked
    check_claim: Callable[[str, list[str]], float | None] | None = None
    # the answer set aside by a second look (its words were in no sentence of the sources); `answer` is the one read
    # again from the passages that match the question best (ask_run.second_look)
    first_answer: Answer | None = None
    # how it was planned (engine/ask_plan.py) and the index of the step that answered: what --json and --explain
    # show, so a fallback taken is visible
    plan: Plan | None = None
    answered_by: int | None = None

    def plan_steps(self) -> list[dict[str, str | None]] | None:
        """The plan's steps in order, each with what became of it (Plan.outcomes); None: answered without a plan."""
        return None if self.plan is None else self.plan.outcomes(self.answered_by)

    def verify(self) -> list[SentenceSupport]:
        """Check the answer's quotes with the answer model: with `check_claim`, in an answer of several sentences
        (one sentence is shown with support() instead), a sentence whose quotes the answer model doubts state it is
        not supported (the first MAX_CHECKED sentences with quotes: about a second each on 2 cores). The one step of
        a result that runs the model, so a face asks for it before it renders or serialises the answer; what it
        found is what sentence_support() returns from then on (computed once per answer text)."""
        text = self.answer.text.strip()
        cached = self.__dict__.get("_verified")
        if cached is None or cached[1] != text:
            found = list(self._sentences_by_words())
            if self.check_claim is not None and len(found) > 1:
                tried = 0
                for n, s in enumerate(found):
                    if not (s.supported and s.evidence):
                        continue
                    tried += 1
                    quotes = [e.quote for e in s.evidence]
                    p_stated = None if tried > MAX_CHECKED else self.check_claim(s.sentence, quotes)
                    if p_stated is None:
                        found[n] = replace(s, checked=False)
                    else:
                        found[n] = replace(s, checked=True, supported=p_stated >= STATED_AT,
                                           doubted=p_stated < STATED_AT)
            cached = self.__dict__["_verified"] = (found, text)
        return cached[0]

    def sentence_support(self) -> list[SentenceSupport]:
        """Each sentence of the answer with the quote that supports it, or none, as verify() judged them; before
        verify() (or once the answer's text changed), by shared words alone, and a sentence the model's check
        would read is marked `checked=False`: that check applied and has not run. Never runs the model."""
        verified = self.__dict__.get("_verified")
        if verified is not None and verified[1] == self.answer.text.strip():
            return verified[0]
        found = self._sentences_by_words()
        if self.check_claim is None or len(found) <= 1:
            return found
        return [replace(s, checked=False) if s.supported and s.evidence else s for s in found]

    def _sentences_by_words(self) -> list[SentenceSupport]:
        """Each sentence of the answer with its quote, judged by shared words (and meaning) alone: computed once per
        answer text, for the second look's check and then for verify's."""
        text = self.answer.text.strip()
        cached = self.__dict__.get("_by_words")
        if cached is None or cached[1] != text:
            cached = self.__dict__["_by_words"] = (support_by_sentence(self.question, text, self.retrieved,
                                                                       embed=self.embed), text)
        return cached[0]

    def support(self) -> Support:
        """The quotes of the sources that support the answer (computed once the answer is complete)."""
        text = self.answer.text.strip()
        cached = self.__dict__.get("_support")
        if cached is None or cached[1] != text:  # an empty answer too is computed once, not skipped
            cached = self.__dict__["_support"] = (support(self.question, text, self.retrieved), text)
        return cached[0]

    def supported(self) -> bool:
        """Whether the sources hold the answer: for one sentence, its quotes hold at least half of its own words;
        for several, at least half of the sentences are supported (a doubted sentence is not), so a summary is not
        judged by one quote, and a sentence the answer model doubts counts against the whole."""
        return self._held(self.sentence_support())

    def supported_by_words(self) -> bool:
        """supported() without the answer model's check of each quote (a second or so a sentence, wanted only for
        showing the evidence): what the second look asks before reading again."""
        return self._held(self._sentences_by_words())

    def _held(self, sentences: list[SentenceSupport]) -> bool:
        if len(sentences) > 1:
            return 2 * sum(s.supported for s in sentences) >= len(sentences)
        return self.support().supported



def capped(limit: int, asked: int | None) -> int:
    """An answer's token limit: the path's own, or the caller's when it asks for fewer."""
    return limit if asked is None else min(limit, asked)


@dataclass
class Asking:
    """One question while it is answered, what every way of reading takes: the workspace (model, embedder,
    answerers), the store, the question and what retrieval searches for, parsed once (`parsed`: the places and
    symbols it names), the scope resolved from it, the resolved options, the conversation so far, when it was asked
    and the caller's stop signal. `named`: the document or folder the question names as a whole, where a step reads
    it (it is not searched within)."""

    ws: Workspace
    store: Store
    question: str
    search: str
    parsed: Scope
    scope: Restriction
    options: AskOptions
    history: list[dict[str, str]] | None
    started: float
    should_stop: Callable[[], bool] | None
    named: NamedWhole | None = None

    @property
    def searched(self) -> str | None:
        """What retrieval looked for, when not the question (AskResult.search)."""
        return self.search if self.search != self.question else None

    def tokens(self, text: str) -> int:
        return len(self.ws.model.tokenize(text))


def answer_question(ws: Workspace, store: Store, question: str, options: AskOptions = AskOptions(), *,
                    history: list[dict[str, str]] | None = None, search: str | None = None,
                    should_stop: Callable[[], bool] | None = None) -> Found:
    """Plan, then retrieve now; return the result (filled in as the stream is consumed) and the answer stream.
    `options`: the choices the question is answered with (engine/ask_options.py, `epi ask`'s defaults).
    Beside them, what is not a choice but this call's own: `history`, the conversation so far (earlier
    {"role", "content"} turns the model reads); `search`, what retrieval and narrowing look for when it is not the
    question itself (a chat follow-up, "and his brother?", searches with the previous question too; the model
    reads the question as asked); `should_stop`, polled while generating, True stops the answer."""
    if not question.strip():
        raise EpiError("the question is empty")
    started = time.perf_counter()
    options = ws.resolve(store, options)
    search = search or question
    parsed = parse_scope(search)
    scope = resolve_scope(store, parsed, options.docs)
    # "what does epi do?": a document or folder asked about as a whole by its name (a place it names, "what is
    # chapter 3 about?", goes by the place)
    named = None
    if seeks_named_whole(options, parsed, scope.titled):
        named = named_whole(store, search, set(documents_matching(store, options.docs)) if options.docs else None)
    catalogue = Catalogue(named=None if named is None else named.name, has_map=store.summaries().count() > 0,
                          reads_whole_parts=ws.reads_whole_parts)
    planned = plan(search, options, parsed, scope.titled, catalogue)
    if planned.boost:
        scope, named = _within_named(store, named, parsed, scope, options.docs), None
    scope = _one_document(ws, store, search, scope)
    return walk(Asking(ws, store, question, search, parsed, scope, options, history, started, should_stop, named),
                planned)


def walk(asking: Asking, planned: Plan) -> Found:
    """The plan's steps in order until one finds something to read; each step's warning is said as it is reached."""
    for n, step in enumerate(planned.steps):
        if step.warning:
            asking.ws.warn(step.warning)
        if step.skipped:
            continue
        found = READERS[step.way](asking)
        if found is not None:
            found[0].plan, found[0].answered_by = planned, n
            return found
    raise AssertionError(f"a plan ends in a lookup, which always answers: {planned.ways}")


def _within_named(store: Store, named: NamedWhole, parsed: Scope, scope: Restriction, docs: tuple[str, ...] | None
                  ) -> Restriction:
    """The scope searched for a named whole (Plan.boost): restricted, and said ("searching h11/ only"), where it is
    not the whole archive, its own opening ranked first. "The tenacity package" is the folder named, not the files
    scope.py guesses from the word (its __init__.py)."""
    if parsed.files:
        scope = resolve_scope(store, replace(parsed, files=[]), docs)
    opening = {r.event.id for r in opening_events(store, named, NAMED_OPENING_TOKENS)}
    if not named.whole_archive:
        within = named.event_ids(store)
        scope = replace(scope, allowed=within if scope.allowed is None else scope.allowed & within,
                        described=scope.described or named.name)
    return replace(scope, boosted=opening | (scope.boosted or set()))


def _one_document(ws: Workspace, store: Store, search: str, scope: Restriction) -> Restriction:
    """A place the question names ("chapter 3") that several documents hold, none named: the answer reads the
    one whose passages match the question best, and says which (Restriction.choose_document)."""
    if scope.by_document is None:
        return scope
    best = ws.retrieve(store, search, 1, 0, scope=scope)
    if not best:
        return scope
    names = {d.id: d.display_path for d in store.documents() if d.id in scope.by_document}
    chosen = best[0].document
    return scope.choose_document(chosen.id, chosen.display_path, sorted(names.values()))


def read_lookup(a: Asking) -> Found:
    """The k best events and their neighbours (a layered answer: a pool of them), read in relevance order."""
    ws, store, search, options = a.ws, a.store, a.search, a.options
    k, neighbours, mode, layered = options.k, options.neighbours, options.mode, options.layered
    # The sources are cut to the room the question leaves (the best hit is always read: room_beside keeps one)
    room = min(EVIDENCE_BUDGET, ws.room_beside(a.question, a.history))
    retrieved = relevance_order(ws.retrieve(store, search, k, neighbours, scope=a.scope,  # the order read
                                            token_budget=min(LAYERED_ANCHOR_TOKENS, room) if layered else room))
    anchors = {r.event.id for r in retrieved}
    if layered:  # a pool of whole blocks; each layer picks its own (narrowing would leave no blocks to pick)
        retrieved = _pool(ws, store, search, k, neighbours, a.scope)
    ws.note_retrieved(store, [r.event.id for r in retrieved])
    answer = Answer()
    answer.timings.retrieve_s = time.perf_counter() - a.started
    # `narrow`: the answer reads only the few sentences that match the question best (engine/retrieval/evidence.py);
    # never a layered pool, whatever the model's default (AskOptions refuses --narrow with --layered)
    narrow = not layered and (ws.narrows_by_default if options.narrow is None else options.narrow)
    focus = evidence_narrow(search, retrieved) if narrow else []
    result = AskResult(a.question, mode, retrieved, answer, a.scope, focus=focus or None, search=a.searched)
    answerer = ws.answerer(mode, store, layered)
    if layered:  # every layer sees what kv mode would read, then what its own query picks from the pool
        answerer.anchors = anchors
    weights = episodic_weights(retrieved) if options.epman else None
    read, spans = retrieved, None
    if focus:
        read, spans = [retrieved[i] for i, _ in focus], [ss for _, ss in focus]
        weights = None if weights is None else [weights[i] for i, _ in focus]
    lead_spans = None
    # only from the narrowed sentences: a few, all relevant
    if focus and options.short and asks_for_a_fact(a.question):
        lead_spans = answer_spans([readable(r.event.text[x:y]) for r, ss in zip(read, spans) for x, y in ss],
                                  a.question)
    excerpts = None
    if options.cold_seconds and mode == "kv" and not layered and not focus:
        kept, result.left_cold, excerpts = fit_cold(ws, answerer, search, read, options.cold_seconds)
        result.cold_passages = [r for r in kept if r.event.id in excerpts]
        if result.left_cold:
            kept_ids = {id(r) for r in kept}
            weights = None if weights is None else [w for r, w in zip(read, weights) if id(r) in kept_ids]
            read = result.retrieved = kept
    cold = {"excerpts": excerpts} if excerpts else {}  # kv mode only (fit_cold)
    max_tokens = capped(ANSWER_TOKENS, options.answer_tokens)
    stream = answerer.stream(a.question, read, a.history, a.started, answer, max_tokens=max_tokens,
                             should_stop=a.should_stop, weights=weights, spans=spans, lead_spans=lead_spans or None,
                             **cold)
    if options.second_look and mode == "kv" and not layered and not focus and not excerpts:
        stream = second_look(stream, result, answerer, a, max_tokens)
    return result, timed_cold(ws, stream, answerer)


def _pool(ws: Workspace, store: Store, search: str, k: int, neighbours: int, scope: Restriction
          ) -> list[RetrievedEvent]:
    """A layered answer's pool, in the order it is read (best last): LAYERED_POOL_K hits (at least `k`) per answer
    context's room of it, with their neighbours, up to pool_tokens() and MAX_POOL events."""
    hits = max(k, LAYERED_POOL_K * ws.pool_tokens() // ws.room())
    return relevance_order(ws.retrieve(store, search, hits, neighbours, scope=scope, pool=True))[-MAX_POOL:]


def fit_cold(ws: Workspace, answerer: KVModeAnswerer, question: str, retrieved: list[RetrievedEvent], seconds: float
             ) -> tuple[list[RetrievedEvent], list[RetrievedEvent], dict[int, str]]:
    """(read, left out, {event id: text read instead of the whole event}) for the events without a block in the
    answer model's tier, so that preparing them takes at most `seconds` at this machine's prefill rate: passages
    that match the question first, then events whole while time is left (engine/retrieval/cold_reading.py)."""
    room = seconds * prefill_rate.rate(ws.prepared.sha256, ws.threads or default_threads(),
                                       ws.model.info.n_params)
    cold = [i for i, r in enumerate(retrieved) if not answerer.keeper.has(event_block_key(r))]
    if sum(retrieved[i].n_tokens for i in cold) <= room:
        return retrieved, [], {}
    return cold_reading.choose(question, retrieved, cold, int(room),
                               lambda t: len(ws.model.tokenize(t))).applied(retrieved)


def timed_cold(ws: Workspace, stream: Iterator[str], answerer) -> Iterator[str]:
    """The answer's pieces; afterwards, how fast its cold events were prefilled is kept for the next question."""
    yield from stream
    tokens, seconds = getattr(answerer, "cold_prefilled", (0, 0.0))
    prefill_rate.record(ws.prepared.sha256, ws.threads or default_threads(), tokens, seconds)


def second_look(first: Iterator[str], result: AskResult, answerer: KVModeAnswerer, a: Asking, max_tokens: int
                ) -> Iterator[str]:
    """The first answer's pieces; then, when the sources do not hold its words, a SecondLook piece and the
    answer read again: the passages of the retrieved events that match the question best (each sentence with
    its neighbours, as a cold question reads them: engine/retrieval/cold_reading.py), SECOND_LOOK_TOKENS at
    most, read as text after the sink (an event short enough to fit whole is loaded from its block). The small
    model copies from a few sentences near the question more faithfully than from ~2k tokens of blocks
    (docs/heldout.md, "A second look"). An empty second answer leaves the first in place."""
    yield from first
    if result.supported_by_words() or (a.should_stop is not None and a.should_stop()):
        return
    read = result.retrieved
    reading = cold_reading.choose(a.search, read, list(range(len(read))), SECOND_LOOK_TOKENS, a.tokens)
    if not reading.passages:  # no sentence matches the question: reading the same events again says the same
        return
    kept, _, excerpts = reading.applied(read)
    again = Answer()
    again.timings.retrieve_s = result.answer.timings.retrieve_s
    first_rate = answerer.cold_prefilled  # the first answer's cold events: the next stream starts its own count
    on_prepare, answerer.on_prepare = answerer.on_prepare, None  # passages of blocks it has: nothing is "cold"
    yield SecondLook()
    try:
        yield from answerer.stream(result.question, kept, a.history, a.started, again, max_tokens=max_tokens,
                                   should_stop=a.should_stop, excerpts=excerpts)
    finally:
        answerer.on_prepare = on_prepare
        answerer.cold_prefilled = first_rate
    if not again.text.strip():
        return
    # the timings are the question's: its first token is the one the user saw first, its end the second's
    again.timings.first_token_s = result.answer.timings.first_token_s
    result.first_answer, result.answer = result.answer, again


def _whole_room(a: Asking, request: str) -> int:
    """Tokens of sources the whole-scope context holds beside `request` and the conversation."""
    asked = a.ws.asked_tokens(request, a.history)
    return a.ws.whole_context - WHOLE_ANSWER_TOKENS - max(QUESTION_ROOM, asked + PROMPT_OVERHEAD)


def _named_events(scope: Restriction) -> set[int] | None:
    """The events of the part a question names (None or empty: it names none that resolved)."""
    ids = scope.allowed
    if scope.boosted:
        ids = scope.boosted if ids is None else (scope.boosted & ids) or ids
    return ids


def _begin_part_answer(a: Asking, retrieved: list[RetrievedEvent]) -> Answer:
    """What reading a named part does before answering: its events cited by the part named, counted as
    retrieved; the answer, timed from the question."""
    for r in retrieved:
        r.cited_section = a.scope.cited_section(r.section) if a.scope.places and r.summary is None else None
    a.ws.note_retrieved(a.store, [r.event.id for r in retrieved if r.summary is None])
    answer = Answer()
    answer.timings.retrieve_s = time.perf_counter() - a.started
    return answer


def _stream_whole(a: Asking, result: AskResult, request: str, limit: int) -> Found:
    """A part, the map's summaries or a named whole read in the whole-scope context, at most `limit` tokens of
    answer (or the caller's fewer)."""
    answerer = a.ws.answerer(a.options.mode, a.store, whole=True)
    stream = answerer.stream(request, result.retrieved, a.history, a.started, result.answer,
                             max_tokens=capped(limit, a.options.answer_tokens), should_stop=a.should_stop)
    return result, timed_cold(a.ws, stream, answerer)


def read_each_part(a: Asking) -> Found | None:
    """A question about each section of a named part: the map's summaries of its sections, in order
    (whole_scope.read_sections). None when the map has none for it (the part is then read whole)."""
    ids = _named_events(a.scope)
    if not ids:
        return None
    what = a.scope.described or "the part named"
    request = each_section_request(a.question, what)
    reading = read_sections(a.store, ids, _whole_room(a, request), tokens_of=a.tokens)
    if reading is None:
        return None
    retrieved = reading.events
    answer = _begin_part_answer(a, retrieved)
    n = len(reading.stand_ins)
    passages = sum(r.summary is None for r in retrieved)
    described = f"read {n} section summaries of {what}" + (
        f" and {passages} passage{'s' if passages != 1 else ''} they do not cover" if passages else "")
    result = AskResult(a.question, a.options.mode, retrieved, answer, a.scope, kind=QuestionKind.WHOLE,
                       reading=described, search=a.searched)
    # A line for each section: the 1.5B model repeats the section summaries it read, so there is room for them
    # all and a line more each, up to the cap (docs/heldout.md, "Each section of a part").
    repeated = sum(r.n_tokens for r in retrieved if r.summary is not None)
    return _stream_whole(a, result, request, min(max(WHOLE_ANSWER_TOKENS, repeated + EVERY_PART_LINE_TOKENS *
                                                     len(retrieved)), EVERY_PART_ANSWER_TOKENS))


def read_named_whole(a: Asking) -> Found | None:
    """A document or folder named as a whole, read whole from its blocks as far as the context holds (the best
    parts of it, in order, when it does not fit)."""
    within = Restriction(allowed=a.named.event_ids(a.store), described=a.named.name)
    found = read_whole(replace(a, scope=within))
    if found is not None:
        found[0].scope = a.scope
    return found


def read_explained(a: Asking) -> Found | None:
    """A question asking for an explanation: the definitions or sections its best passages sit in, read whole
    (None when no passage matches it)."""
    hits = a.ws.retrieve(a.store, a.search, a.options.k, a.options.neighbours, scope=a.scope)
    if not hits:
        return None
    wider = Restriction(allowed=enclosing(a.store, hits), described="the definitions or sections the best "
                        "passages sit in", query=a.scope.query)
    found = read_whole(replace(a, scope=wider), kind=QuestionKind.EXPLAIN)
    if found is not None:
        found[0].scope = a.scope
    return found


def read_whole(a: Asking, kind: QuestionKind = QuestionKind.WHOLE) -> Found | None:
    """A question about a named part as a whole: the part read in document order from its blocks, as far as the
    whole-scope context holds (engine/retrieval/whole_scope.py). None when the question names no part that
    resolved to events (it is then answered as a lookup)."""
    ids = _named_events(a.scope)
    if not ids:
        return None
    what = a.scope.described or ", ".join(".".join(s) for s in a.parsed.symbols) or "the part named"
    text = a.scope.query or a.search
    request = whole_scope_request(a.question, what, False, False)
    reading = read_scope(a.store, ids, a.ws.embedder.embed_query(text), text, _whole_room(a, request),
                         tokens_of=a.tokens)
    code = all(r.document.kind == "code" for r in reading.events if r.summary is None)
    request = whole_scope_request(a.question, what, reading.complete, code)
    answer = _begin_part_answer(a, reading.events)
    result = AskResult(a.question, a.options.mode, reading.events, answer, a.scope, kind=kind,
                       reading=reading.described(what), search=a.searched)
    return _stream_whole(a, result, request, WHOLE_ANSWER_TOKENS)


def read_overview(a: Asking) -> Found | None:
    """A question about a document or the archive as a whole: the map's summaries, most general first (the plan
    skips this when there is no map). `a.named`: the document or folder the question names as a whole, whose
    summaries alone are read. None when the map holds no summary of it."""
    store, search, options, named = a.store, a.search, a.options, a.named
    doc_ids = set(documents_matching(store, options.docs)) if options.docs else None
    collection_keys: set[str] = set()
    if named is not None:
        doc_ids = named.document_ids if doc_ids is None else doc_ids & named.document_ids
        collection_keys = named.collection_keys
    every_part = asks_each_part(search)
    package = package_globs(a.parsed.files) if every_part else []
    if package:  # "every file of the tenacity package": that package's files only
        in_named = set(documents_matching(store, package))
        doc_ids = in_named if doc_ids is None else doc_ids & in_named
    query = None if every_part else a.ws.embedder.embed_query(search)  # every part is read: nothing to rank
    chosen = overview_summaries(store, query, search, OVERVIEW_CHARS, doc_ids, every_part, collection_keys)
    if not chosen:
        return None
    retrieved = summary_sources(store, chosen)
    opening = opening_events(store, named, NAMED_OPENING_TOKENS) if named is not None else []
    retrieved += opening  # its own opening words, nearest the question: what a summary may have blurred
    answer = Answer()
    answer.timings.retrieve_s = time.perf_counter() - a.started
    levels = {s.level for s in chosen}
    of = f" of {named.name}" if named is not None else ""
    reading = f"read {len(chosen)} summar{'y' if len(chosen) == 1 else 'ies'} of the map{of} (" + ", ".join(
        f"{sum(s.level == lv for s in chosen)} {lv}" for lv in ("collection", "document", "part", "section")
        if lv in levels) + ")"
    if opening:
        reading += (f" and the opening of {opening[0].document.display_path} "
                    f"({sum(r.n_tokens for r in opening):,} tokens)")
    result = AskResult(a.question, options.mode, retrieved, answer, a.scope, kind=QuestionKind.OVERVIEW,
                       reading=reading, search=a.searched)
    # A line for each part: room for about EVERY_PART_LINE_TOKENS a part read, up to EVERY_PART_ANSWER_TOKENS.
    limit = min(max(WHOLE_ANSWER_TOKENS, EVERY_PART_LINE_TOKENS * len(chosen)), EVERY_PART_ANSWER_TOKENS) \
        if every_part else WHOLE_ANSWER_TOKENS
    return _stream_whole(a, result, overview_request(a.question, every_part), limit)


def opening_events(store: Store, named: NamedWhole, budget: int) -> list[RetrievedEvent]:
    """The first events of the named whole's opening document (opening_document), up to `budget` tokens."""
    doc = opening_document(named) if budget > 0 else None
    out: list[RetrievedEvent] = []
    used = 0
    for ordinal in range(doc.n_events if doc is not None else 0):
        event = store.event_at(doc.id, ordinal)
        if event is None or out and used + event.token_end - event.token_start > budget:
            break
        out.append(RetrievedEvent(event, doc, None, None))
        used += out[-1].n_tokens
    return out


# Each way a plan's step names (ask_plan.WAYS), and the function that reads it.
READERS: dict[str, Callable[[Asking], Found | None]] = {
    "each_part": read_each_part, "whole": read_whole, "named_whole": read_named_whole, "overview": read_overview,
    "explain": read_explained, "lookup": read_lookup}
