"""The engine's front door: wires the parts a command needs (model, embedder, store), loads each only when first
used, and runs an ingest or an answer. Every method returns plain data and raises EpiError/StoreError on failure;
the CLI imports the rest of the engine only for option values and pure helpers (names, parsing, citations).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import cached_property, partial
from pathlib import Path

from ..store import Store, StoreIdentity, StoreMismatchError
from .answer.kv_mode import KVModeAnswerer, PrepareProgress
from .answer.layered import LayeredAnswerer
from .answer.text_mode import TextModeAnswerer
from .ask_options import AskOptions, AskRequest
from .ask_run import AskResult, answer_question
from .budgets import (ANSWER_CONTEXT, ANSWER_TOKENS, EVIDENCE_BUDGET, LAYER_BUDGET, MIN_SOURCE_ROOM, PROMPT_OVERHEAD,
                      QUESTION_ROOM, SUMMARY_TOKENS, WHOLE_CONTEXT)
from .embed.embedder import EMBED_DIM, EMBEDDER_NAME, KNOWN_NAMES, Embedder
from .embed.reembed import ReembedProgress, reembed
from .errors import EpiError
from .ingest.cluster import ClusterIngestor, ClusterSpec, WorkerJob
from .ingest.document_pass import DEFAULT_COMMIT_EVERY
from .ingest.pipeline import Ingestor
from .ingest.segment import SegmentParams
from .kv.keeper import DEFAULT_KIND, BlockKeeper, tier_config
from .llama import layer_visibility
from .llama import prefill_rate
from .llama.backend import LlamaModel, default_threads
from .llama.models import (BUNDLED_MODEL_FILE, WHOLE_READING_PARAMS, PreparedModel, answering_alternative,
                           prepare_model)
from .paths import cache_dir, store_path
from .retrieval.passage_rank import best_sentence_ranking
from .retrieval.retrieve import RetrievedEvent, retrieve
from .retrieval.scope import Restriction, names_a_place
from .retrieval.scope import parse as parse_scope
from .retrieval.scope import resolve as resolve_scope
from .answer.map_writer import MapProgress, MapWriter
from .answer.claim_check import CHECKING_PARAMS, ClaimChecker
from .answer.condense import Condenser, search_for
from . import warming
from .warming import WarmResult


LAYERED_UNAVAILABLE = ("--layered needs epi's patched llama.cpp, and this llama-cpp-python lacks the patch: run "
                       "./install.sh from epi's source folder (`epi doctor` says whether the patch is in)")
MAX_EVENT_TOKENS = 1024  # the ingest context grows with it (ingest.ingest_context): an undecided event stays in it


def apply_kv_budget(store: Store, n_bytes: int) -> int:
    """Record a new KV budget and evict down to it at once (least recently used blocks first); bytes evicted."""
    return store.change_kv_budget(n_bytes)


class Workspace:
    def __init__(self, model: str | None = None, store: str | None = None, threads: int | None = None,
                 warn: Callable[[str], None] | None = None, on_prepare: PrepareProgress | None = None):
        self.model_choice = model
        self.store_dir: Path = store_path(store)
        self.threads = threads
        self.warn = warn or (lambda message: None)
        self.on_prepare = on_prepare  # kv mode: progress of events prepared from text (cold)
        self._answerers: dict[str, TextModeAnswerer | KVModeAnswerer] = {}
        self._condenser: Condenser | None = None
        self._claim_checker: ClaimChecker | None = None
        self._closes = 0  # close() counts: a result asked before a close does not load the model again to check
        self._warned_closed = -1
        # --layered: tokens of retrieved blocks in the pool (0: what the answer context holds, laid out in order;
        # more: lanes sharing positions, engine/answer/layered.py, each layer still seeing LAYER_BUDGET of them)
        self.layered_pool = 0
        # each answer's retrieved events counted in the store's retrievals.log (store/retrieval_log.py), the order
        # `epi warm` prepares blocks in; `epi mcp` turns it off: the server writes nothing but KV blocks
        self.record_retrievals = True
        self._told_text_only = False

    @cached_property
    def prepared(self) -> PreparedModel:
        return prepare_model(self.model_choice, self.warn)

    @cached_property
    def model(self) -> LlamaModel:
        model = LlamaModel(self.prepared.path)
        self._loaded_model = model  # this workspace's own: close() frees it (a model handed in is left alone)
        reason = model.cannot_answer_reason()
        if reason:
            raise EpiError(f"epi cannot answer with {self.prepared.source.name}: {reason}. "
                           f"{answering_alternative()}")
        return model

    @cached_property
    def text_only_reason(self) -> str | None:
        """Why this model answers in text mode only (its KV cannot be cut into event blocks), or None."""
        return self.model.block_reuse_reason()

    @property
    def keeps_blocks(self) -> bool:
        """Whether this model can load and keep event blocks (kv mode, warming, prefetch, the map's readings)."""
        return self.text_only_reason is None

    @cached_property
    def embedder(self) -> Embedder:
        return Embedder(self.threads)

    def identity(self, params: SegmentParams) -> StoreIdentity:
        """The archive's identity as this run would record it: the embedder binds; the segmenter is recorded."""
        vocab = hashlib.sha256(b"\x00".join(self.model.pieces())).hexdigest()
        segmenter = {"model_name": self.model.info.name, "model_sha256": self.prepared.sha256,
                     "tokenizer_sha256": vocab}
        return StoreIdentity(embedder=self.embedder.name, embed_dim=EMBED_DIM, segmenter=segmenter,
                             segmentation=params.as_dict())

    def store_for_writing(self, params: SegmentParams) -> Store:
        """The store, created with today's embedder, or opened with the one it was made with if this epi still knows
        it (a store from before token windows goes on with word windows: embedder.py)."""
        try:
            return Store.create_or_open(self.store_dir, self.identity(params))
        except StoreMismatchError as exc:
            if exc.field != "embedder" or exc.stored not in KNOWN_NAMES:
                raise
            self.embedder = self.embedder.named(exc.stored)
            return Store.create_or_open(self.store_dir, self.identity(params))

    def store_for_reading(self) -> Store:
        store = Store.open_existing(self.store_dir)
        self._adopt_embedder(store)
        return store

    def _adopt_embedder(self, store: Store) -> None:
        """Embed as `store` was embedded, if this epi knows how (embedder.py: KNOWN_NAMES); check_store refuses
        the rest."""
        if store.identity.embedder in KNOWN_NAMES:
            self.embedder = self.embedder.named(store.identity.embedder)

    def check_store(self, store: Store) -> None:
        """Asking needs the embedder the archive's vectors come from (any that this epi knows is taken up); any chat
        model can answer (its own KV tier)."""
        self._adopt_embedder(store)
        store.check_identity(StoreIdentity(embedder=self.embedder.name, embed_dim=EMBED_DIM))

    # -- commands ---------------------------------------------------------------------------------------------

    def reembed(self, store: Store, progress: Callable[[ReembedProgress], None] | None = None) -> ReembedProgress:
        """`store`'s vectors made again with this epi's embedder windows (engine/embed/reembed.py); the workspace
        embeds as the store does afterwards."""
        result = reembed(store, self.embedder.named(EMBEDDER_NAME), progress)
        self._adopt_embedder(store)
        return result

    def block_keeper(self, store: Store, kind: str | None = None) -> BlockKeeper:
        """This model's KV tier of the store (blocks of `kind`, default the store's), with the store's budget."""
        if not self.keeps_blocks:
            raise EpiError(f"{self.prepared.source.name} cannot keep KV blocks: {self.text_only_reason}; "
                           "it answers in text mode (--mode text)")
        config = tier_config(self.model, self.prepared.sha256, kind or store.kv_block_kind)
        keeper = BlockKeeper(store.kv_space().tier(config), self.model, self.warn)
        keeper.document_exists = store.has_document_content
        return keeper

    def ingestor(self, store: Store, params: SegmentParams, kv_kind: str | None = DEFAULT_KIND,
                 commit_every: int = DEFAULT_COMMIT_EVERY) -> Ingestor:
        """The ingest pass fills the segmenter's own tier with `kv_kind` blocks (None or a budget of 0: none); a long
        document is committed every `commit_every` events (its checkpoints)."""
        self._adopt_embedder(store)
        keeper = None
        if kv_kind is not None and store.kv_budget > 0:
            keeper = self.block_keeper(store, kv_kind)
        return Ingestor(store, self.model, self.embedder, params, self.threads, keeper,
                        segmenter=f"{self.model.info.name} {self.prepared.sha256}", commit_every=commit_every)

    def cluster_job(self, ingestor: Ingestor, spec: ClusterSpec) -> WorkerJob:
        """What a cluster's workers need to read documents exactly as `ingestor` would."""
        tier = ingestor.keeper.tier.config if ingestor.keeper is not None else None
        choice = self.model_choice
        if choice and Path(choice).is_file():  # a worker process runs in a folder of its own: name the file whole
            choice = str(Path(choice).resolve())
        return WorkerJob(choice, self.prepared.sha256, tier, ingestor.params, spec.result_limit,
                         embedder=ingestor.embedder.name)

    @contextmanager
    def ingest_run(self, store: Store, params: SegmentParams, kv_kind: str | None, kv_budget: int | None,
                   commit_every: int = DEFAULT_COMMIT_EVERY, cluster: ClusterSpec | None = None,
                   keep_blocks: bool = True) -> Iterator[Ingestor | ClusterIngestor]:
        """One `epi ingest` run on `store` (closed afterwards): holds the writer lock, applies `kv_budget` (bytes,
        None: unchanged) and `kv_kind` (None: no blocks), and afterwards removes the blocks no event names.
        `cluster`: the documents are read by that Ray cluster's workers, this process commits them. `keep_blocks`
        False: the reader keeps none of its own blocks (another model answers: IngestPlan.reader_keeps_blocks), while
        `kv_kind` still sets the kind the answer model's blocks will take."""
        try:
            with store.writer():
                if kv_budget is not None:
                    apply_kv_budget(store, kv_budget)
                if kv_kind is not None:
                    store.set_kv_block_kind(kv_kind)
                ingestor = self.ingestor(store, params, kv_kind if keep_blocks else None, commit_every)
                try:
                    if cluster is not None:
                        ingestor = ClusterIngestor(ingestor, cluster, self.cluster_job(ingestor, cluster))
                    yield ingestor
                finally:
                    ingestor.close()
                    # Blocks of replaced documents, or of a file that failed or was interrupted before its commit.
                    store.collect_kv_garbage()
                    ingestor.finish_run()
        finally:
            store.close()

    @property
    def narrows_by_default(self) -> bool:
        """Whether answers read only the best-matching sentences unless told otherwise: for the bundled SmolLM2-135M,
        which answers far better from them (16 against 7 of the 46 held-out questions not used to choose it); every
        other model reads the retrieved events whole (docs/heldout.md, "Answer models")."""
        return self.prepared.source.name == BUNDLED_MODEL_FILE

    @property
    def answer_context(self) -> int:
        return min(ANSWER_CONTEXT, self.model.info.n_ctx_train)

    @staticmethod
    def default_mode(store: Store) -> str:
        """kv unless the store keeps no KV blocks at all (a budget of 0, e.g. ingested with --no-kv)."""
        return "kv" if store.kv_budget > 0 else "text"

    @property
    def whole_context(self) -> int:
        return min(WHOLE_CONTEXT, self.model.info.n_ctx_train)

    def answerer(self, mode: str, store: Store | None = None, layered: bool = False, whole: bool = False
                 ) -> TextModeAnswerer | KVModeAnswerer:
        """The answerer of `mode` (kv mode needs the store: its tier and budget); `layered`: kv mode with per-layer
        block selection (engine/answer/layered.py); `whole`: a context of whole_context positions, for questions
        about a part as a whole and for writing the map (a separate context: lookups keep their smaller one)."""
        if layered:
            if mode != "kv":  # a question's options are refused before this (AskOptions, Workspace.resolve)
                raise ValueError("a layered answerer is kv mode's: resolve the AskOptions against the store first")
            if not layer_visibility.available():
                raise EpiError(LAYERED_UNAVAILABLE)
        key = f"kv-layered-{self.pool_tokens()}" if layered else f"{mode}-whole" if whole else mode
        if key not in self._answerers:
            n_ctx = self.whole_context if whole else self.answer_context
            if layered:
                self._answerers[key] = LayeredAnswerer(self.model, n_ctx, self.block_keeper(store), LAYER_BUDGET,
                                                       pool_tokens=self.pool_tokens(), n_threads=self.threads,
                                                       warn=self.warn,
                                                       sink_dir=cache_dir() / "kv-sinks", on_prepare=self.on_prepare)
            elif mode == "kv":
                if store is None:
                    raise ValueError("kv mode answers from a store's KV tier: pass the store")
                self._answerers[key] = KVModeAnswerer(self.model, n_ctx, self.block_keeper(store), self.threads,
                                                       self.warn, sink_dir=cache_dir() / "kv-sinks",
                                                       on_prepare=self.on_prepare)
            else:
                self._answerers[key] = TextModeAnswerer(self.model, n_ctx, self.threads)
            self._answerers[key].session.warm_up()
        return self._answerers[key]

    def scope(self, store: Store, question: str, docs: list[str] | None = None) -> Restriction:
        """The part of the archive `question` names (chapter, section, page, file, code symbol) and `docs` globs
        allow (engine/retrieval/scope.py)."""
        return resolve_scope(store, parse_scope(question), docs)

    def room(self) -> int:
        """Tokens of sources the answer context holds in order, beside the question and the answer."""
        return self.answer_context - ANSWER_TOKENS - QUESTION_ROOM

    def room_beside(self, question: str, history: list[dict[str, str]] | None = None) -> int:
        """Tokens of sources that fit beside this question (and chat history): room(), or less for a question that
        takes more than QUESTION_ROOM; a question leaving almost none is refused in one line."""
        asked = self.asked_tokens(question, history)
        room = self.answer_context - ANSWER_TOKENS - max(QUESTION_ROOM, asked + PROMPT_OVERHEAD)
        if room < MIN_SOURCE_ROOM:
            raise EpiError(f"the question takes {asked:,} tokens of the answer model's {self.answer_context:,}, "
                           "leaving no room for sources; shorten it")
        return min(room, self.room())

    def pool_tokens(self) -> int:
        """Tokens of blocks in a layered answer's pool."""
        return self.layered_pool or self.room()

    def retrieve(self, store: Store, question: str, k: int, neighbours: int = 1, docs: list[str] | None = None,
                 scope: Restriction | None = None, pool: bool = False, token_budget: int | None = None
                 ) -> list[RetrievedEvent]:
        """The events an answer reads; `pool`: up to pool_tokens() of them (a layered answer's pool); `token_budget`:
        at most this many tokens of them instead (the best hit is always kept)."""
        if k < 1:
            raise EpiError("-k must be at least 1")
        self._adopt_embedder(store)
        scope = scope or self.scope(store, question, docs)
        text = scope.query or question  # inside "chapter 3", search for the rest of the question
        query = self.embedder.embed_query(text)
        if token_budget is None:
            token_budget = self.pool_tokens() if pool else min(EVIDENCE_BUDGET, self.room())
        damaged: list = []
        # the candidates are ranked a third time by their best sentence (docs/heldout.md, "Candidates ranked by their
        # best sentence")
        found = retrieve(store, query, text, k, neighbours, token_budget=token_budget, allowed=scope.allowed,
                         boosted=scope.boosted, damaged=damaged, passage_ranking=partial(best_sentence_ranking, text))
        # A damaged event costs the answer that event, not the answer: it is named with what restores it.
        if damaged and not found:
            raise damaged[0]  # nothing left to answer from: the one-line error names the event and the remedy
        for error in damaged:
            self.warn(f"left out of this answer: {error}")
        for r in found:
            r.cited_section = scope.cited_section(r.section) if scope.places else None
        return found

    def resolve(self, store: Store, options: AskOptions) -> AskOptions:
        """`options` with the store's default mode filled in when they name none: the record's kv-only rules
        (--epman, --layered) are then checked against the mode that will run, in the record's one line."""
        if not self.keeps_blocks:
            return self._text_only(options)
        return options if options.mode is not None else replace(options, mode=self.default_mode(store))

    def _text_only(self, options: AskOptions) -> AskOptions:
        """A model without blocks reads its sources as text: named kv-only options are refused in one line, and
        the first question says once why it reads, and what that costs."""
        asked = "--mode kv" if options.mode == "kv" else "--layered" if options.layered else \
            "--epman" if options.epman else None
        if asked:
            raise EpiError(f"{asked} needs KV blocks, and {self.prepared.source.name} cannot keep them: "
                           f"{self.text_only_reason}. Leave it out: this model answers in text mode")
        if not self._told_text_only:
            self._told_text_only = True
            rate = prefill_rate.rate(self.prepared.sha256, self.threads or default_threads(), self.model.info.n_params)
            self.warn(f"{self.model.info.name} answers in text mode: {self.text_only_reason}. It re-reads the "
                      f"retrieved events for each question (about {EVIDENCE_BUDGET / rate:,.0f} s for "
                      f"{EVIDENCE_BUDGET:,} tokens on this machine) instead of loading their KV blocks")
        return replace(options, mode="text", cold_seconds=None, second_look=False)

    def answer(self, store: Store, request: AskRequest, *, should_stop: Callable[[], bool] | None = None
               ) -> tuple[AskResult, Iterator[str]]:
        """A face's request (`epi ask`, `epi chat`, Archive, `epi mcp`): its pool sizes the layered answerer, and a
        follow-up is searched as the standalone question it means (condense) while the model reads it as asked."""
        self.layered_pool = request.pool or 0
        turns = request.turns
        search = self.condense(turns, request.question) if turns else None
        return self.ask(store, request.question, request.options, history=turns, search=search,
                        should_stop=should_stop)

    def ask(self, store: Store, question: str, options: AskOptions = AskOptions(), *,
            history: list[dict[str, str]] | None = None, search: str | None = None,
            should_stop: Callable[[], bool] | None = None) -> tuple[AskResult, Iterator[str]]:
        """The question planned and answered (engine/ask_run.py: answer_question), with the result able to check a
        long answer's sentences by meaning."""
        result, stream = answer_question(self, store, question, options, history=history, search=search,
                                         should_stop=should_stop)
        result.embed = self.embedder.embed_query
        if self.checks_claims:
            result.check_claim = partial(self._check_claim, self._closes)
        return result, stream

    @property
    def reads_whole_parts(self) -> bool:
        """Whether questions about a whole part are read whole or from the map, or (below WHOLE_READING_PARAMS,
        measured: llama/models.py) looked up like any other unless --read asks."""
        return self.model.info.n_params >= WHOLE_READING_PARAMS

    @property
    def checks_claims(self) -> bool:
        """Whether the answer model reads each supporting quote to check that it states its sentence: models of a
        billion parameters or more (measured with Qwen 1.5B: docs/heldout.md, "Evidence sentence by sentence: the
        answer model checks each quote"); the bundled SmolLM2-135M is too small to judge."""
        return self.model.info.n_params >= CHECKING_PARAMS

    def _check_claim(self, opened_at: int, sentence: str, quotes: list[str]) -> float | None:
        if opened_at != self._closes:  # closed since the question: loading 1.1 GB again for a check is not wanted
            if self._warned_closed != opened_at:
                self._warned_closed = opened_at
                self.warn("the answer's sentences were not checked by the model: it was closed after the question")
            return None
        if self._claim_checker is None:
            self._claim_checker = ClaimChecker(self.model, self.threads)
        try:
            return self._claim_checker.p_stated(sentence, quotes)
        except EpiError as exc:  # the answer is shown already: the sentence keeps its quote, unchecked
            self.warn(f"a sentence's quote was not checked: {exc}")
            return None

    def asked_tokens(self, question: str, history: list[dict[str, str]] | None) -> int:
        """Tokens of the question and the chat history the model reads besides the sources."""
        return len(self.model.tokenize(question)) + sum(len(self.model.tokenize(m["content"])) for m in history or [])

    def note_retrieved(self, store: Store, event_ids: list[int]) -> None:
        if self.record_retrievals:
            store.note_retrieved(event_ids)

    def condense(self, history: list[dict[str, str]], follow_up: str) -> str:
        """The standalone question a chat follow-up means, written by the answer model from the conversation
        (condense-question); the follow-up itself when there is no history or it names its own chapter, page, file
        or symbol. A rewrite that resolved nothing is replaced by the last question and the follow-up together
        (condense.search_for)."""
        if not history or names_a_place(follow_up):
            return follow_up
        if self._condenser is None:
            self._condenser = Condenser(self.model, self.threads)
        return search_for(history, follow_up, self._condenser.rewrite(history, follow_up))

    def map_answerer(self, store: Store) -> TextModeAnswerer | KVModeAnswerer:
        """What writes the map: whole parts from blocks, or as text for a model without blocks (slower, the same
        summaries)."""
        return self.answerer("kv" if self.keeps_blocks else "text", store, whole=True)

    def write_map(self, store: Store, progress: Callable[[MapProgress], None] | None = None,
                  documents: set[str] | None = None, should_stop: Callable[[], bool] | None = None) -> MapProgress:
        """Summaries of every part, document and collection that lacks a current one (engine/answer/map_writer.py),
        from this model's blocks; resumable. `documents`: only these (their stored paths)."""
        self._adopt_embedder(store)
        answerer = self.map_answerer(store)
        writer = MapWriter(store, answerer, f"{self.model.info.name} {self.prepared.sha256[:12]}",
                           self.embedder.embed_query,
                           room=self.whole_context - SUMMARY_TOKENS - QUESTION_ROOM, should_stop=should_stop)
        chosen = None if documents is None else [d for d in store.documents() if d.path in documents]
        try:
            return writer.run(chosen, progress)
        finally:
            answerer.reset()

    def warm(self, store: Store, progress: Callable[[int, int], None] | None = None,
             documents: set[str] | None = None) -> WarmResult:
        """`epi warm`: this model's blocks for the events its tier lacks (engine/warming.py, warm)."""
        return warming.warm(self, store, progress, documents)

    def likely_next(self, store: Store, read: list[RetrievedEvent]) -> list[int]:
        """What `epi chat` prepares while the user types (engine/warming.py, likely_next)."""
        return warming.likely_next(self, store, read)

    def prefetch(self, store: Store, event_ids: list[int], should_stop: Callable[[], bool] | None = None) -> int:
        """The blocks of `event_ids` prepared in order (engine/warming.py, prefetch); the events prepared."""
        return warming.prefetch(self, store, event_ids, should_stop)

    def close(self) -> None:
        """Free the contexts and the model's weights (a later call loads them again). `epi ingest` kept the reading
        model loaded while a second workspace warmed and mapped with the same model: two copies, 4.3 GB at peak
        (docs/benchmarks.md, "Memory")."""
        self._closes += 1
        for answerer in self._answerers.values():
            answerer.close()
        self._answerers.clear()
        for helper in (self._condenser, self._claim_checker):
            if helper is not None:
                helper.close()
        self._condenser = self._claim_checker = None
        own = self.__dict__.pop("_loaded_model", None)
        if own is not None and self.__dict__.get("model") is own:
            del self.__dict__["model"]
            own.close()
