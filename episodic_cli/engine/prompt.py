"""Every text the model reads: the system rules, the sources turn, kv mode's prompt around its blocks, the sink.

Ingest and answering both use it: the ingest pass computes each KV block behind the same sink tokens an answer loads
it behind, so the sink belongs to neither of them.
"""
from __future__ import annotations

import re

import numpy as np

from .llama.backend import LlamaModel
from .retrieval.citations import citation
from .retrieval.retrieve import RetrievedEvent

SYSTEM_PROMPT = (
    "You answer questions about the user's documents. Use only the numbered sources. "
    "Copy names, numbers and identifiers exactly as they are written in the sources. "
    "Answer briefly. If the sources do not contain the answer, say that the documents do not say."
)
# Splits kv mode's rendered template at block places; no document or question text keeps control characters.
BLOCK_MARK = "\x1f"


def numbered_sources(sources: list[tuple[str, str]]) -> str:
    """Text mode's evidence: "[i] heading" then the text, for each (heading, text). The evaluation's baselines
    lay out the sources they pick the same way."""
    return "\n\n".join(f"[{i}] {heading}\n{text.strip()}" for i, (heading, text) in enumerate(sources, 1))


def sources_turn(question: str, sources: list[tuple[str, str]]) -> str:
    """The user turn of a text-mode prompt: the numbered sources, then the question last."""
    return f"Sources:\n\n{numbered_sources(sources)}\n\nQuestion: {question}"


def clean_question(question: str) -> str:
    """No control characters in prompts (kv mode marks block places with one)."""
    return "".join(ch for ch in question if ch >= " " or ch in "\n\t")


def build_messages(question: str, retrieved: list[RetrievedEvent], history: list[dict[str, str]] | None = None
                   ) -> list[dict[str, str]]:
    """Text mode's prompt: system rules, earlier turns (chat), then one user turn holding the numbered sources and,
    last, the question."""
    question = clean_question(question)
    # The prompt's headings stay document + pages/lines (as kv mode's blocks carry none): structure is for the reader.
    user = sources_turn(question, [(citation(r, structure=False), r.event.text) for r in retrieved]) if retrieved else (
        f"(No sources were found in the archive.)\n\nQuestion: {question}")
    return [{"role": "system", "content": SYSTEM_PROMPT}, *(history or []), {"role": "user", "content": user}]


def focused_messages(question: str, quotes: list[str], history: list[dict[str, str]] | None = None
                     ) -> list[dict[str, str]]:
    """Text mode's prompt when the evidence is narrowed to a few sentences (engine/retrieval/evidence.py): the sentences
    numbered without headings (a small model copies a heading's path instead of the fact), then the question."""
    question = clean_question(question)
    listed = "\n\n".join(f"[{i}] {q.strip()}" for i, q in enumerate(quotes, 1))
    user = f"Sources:\n\n{listed}\n\nQuestion: {question}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, *(history or []), {"role": "user", "content": user}]


def kv_messages(question: str, n_blocks: int, history: list[dict[str, str]] | None = None,
                quotes: list[str] | None = None) -> list[dict[str, str]]:
    """kv mode's prompt: the sources are the blocks themselves (no per-source headers: every decoded token between
    blocks costs time, and epi shows the citations beside the answer); earlier turns follow the blocks. With
    `quotes` (narrowed evidence: a few sentences) they are the sources instead, numbered as text mode numbers them,
    and decoded behind the sink: measured on the held-out sets, the small model answers far better from the right
    sentences alone than from whole blocks, and better from them as text than from their cells cut out of the
    blocks (docs/evaluation.md, 2026-11-23)."""
    question = clean_question(question)
    earlier = "".join(
        f"{'User' if m['role'] == 'user' else 'You'}: {clean_question(m['content']).strip()}\n" for m in history or []
    )
    earlier = f"Earlier in this conversation:\n{earlier}\n" if earlier else ""
    listed = "\n\n".join(f"[{i}] {q.strip()}" for i, q in enumerate(quotes or [], 1))
    if quotes:  # narrowed evidence (engine/retrieval/evidence.py), decoded as text right after the sink
        user = f"Sources:\n\n{BLOCK_MARK}{listed}\n\n{earlier}Question: {question}"
    elif n_blocks:
        user = f"Sources:\n\n{BLOCK_MARK * (n_blocks + 1)}\n\n{earlier}Question: {question}"
    else:
        user = f"(No sources were found in the archive.)\n\n{earlier}Question: {question}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def sink_tokens(model: LlamaModel) -> np.ndarray:
    """The answer prompt's fixed prefix (system rules, the user turn up to "Sources:"): kv mode's sink block, and
    the sink the ingest pass computes every block behind, so that an answer loads each block behind the very tokens
    it was computed behind (EM-LLM's initial tokens, shared by ingest and answers)."""
    return model.tokenize(model.apply_chat_template(kv_messages("", 1)).split(BLOCK_MARK)[0], special=True)


# -- whole-scope answers and the map ---------------------------------------------------------------------------
# Written after the question, in the same user turn: the sink (system rules) is fixed, since every block was computed
# behind it, so whatever a kind of question needs besides is said here.

def asks_how(question: str) -> bool:
    """Whether a whole-scope question asks how or why rather than what happens or what it says."""
    return bool(re.search(r"\bhow\b|\bwhy\b|\bexplain|\bdecide|\bwork", question.lower()))


def _whole_focus(question: str, code: bool) -> str:
    """What a whole answer should cover for this kind of question."""
    lowered = question.lower()
    if asks_how(question):
        return "how it works, step by step, with the conditions and values that decide each step"
    if re.search(r"\bwho\b|\bwhom\b|\bcharacters?\b|\bpeople\b", lowered) or not code and "happen" in lowered:
        return "the people, what each of them does and to whom, in the order it happens"
    if code:
        return "what it is for, its main functions or classes, and how they work together"
    return "what happens or what it explains, in order, naming who and what is involved"


def whole_scope_request(question: str, described: str, complete: bool, code: bool) -> str:
    """A question about a part as a whole, with what the sources are (all of it, or parts and summaries) and what a
    whole answer should cover for this kind of question."""
    what = f"all of {described}, in order" if complete else (
        f"the parts of {described} that match the question best, in order, and summaries of the rest")
    return (f"{question}\n\n(The sources are {what}. Answer from the whole of them, not only the last one, "
            f"in a few sentences: {_whole_focus(question, code)}. Use the names exactly as the sources write them.)")


def overview_request(question: str, every_part: bool = False) -> str:
    if every_part:
        return (f"{question}\n\n(The sources are summaries of the documents and then of their parts, in order. "
                "Answer part by part, in order, one short line for each, naming the part as its summary is labelled "
                "and using the names exactly as the summaries write them.)")
    return (f"{question}\n\n(The sources are summaries of the documents and of their parts, the most general first. "
            "Answer from them in a few sentences, using the names exactly as they write them.)")


def each_section_request(question: str, described: str) -> str:
    """A question about each section of a named part, read from the map's section summaries."""
    return (f"{question}\n\n(The sources are summaries of the sections of {described}, in order, after a summary of "
            "the whole where there is one; a short section is given as it is written. Answer section by section, in "
            "order, one line for each: the section's number and title, then what it covers, using the names "
            "exactly as the sources write them.)")


def part_summary_request(label: str, document: str, code: bool) -> str:
    if code:
        return (f"Summarise the source file {document} above in 2-4 sentences: what it is for, its main classes and "
                "functions, and how they work together. Use the names exactly as written.")
    return (f"Summarise {label} of {document} above in 3-5 sentences: who or what it is about and what happens or "
            "what it explains, in order. Name the people, places and things exactly as the text does.")


def section_summary_request(section: str, part: str, document: str) -> str:
    """A section inside a part: a line or two, what an answer about each section of the part repeats. The section is
    named before its part: named after it, the 1.5B model summarised the part (docs/heldout.md)."""
    return (f"In 1-2 sentences, say what the section {section} (in {part} of {document}) above covers: its topic and "
            "the main things it tells the reader. Name things exactly as the text does.")


def document_summary_request(document: str, code: bool) -> str:
    what = "this file" if code else "the whole document"
    return (f"The sources above are summaries of the parts of {document}, in order. Write a summary of {what} in "
            "4-6 sentences: what it is about, its main people or components, and how it develops or fits together.")


def collection_summary_request(folder: str) -> str:
    return (f"The sources above are summaries of the files under {folder}. Say in 3-5 sentences what this collection "
            "is and what it does, naming its main parts.")


# Worked examples for the rewrite, invented and unrelated to any document: a 1.5B model copies the form of shown
# rewrites more reliably than it follows a description of one (docs/heldout.md, "Follow-ups").
_CONDENSE_EXAMPLES = (
    ("Which function opens the database?", "open_db() in store.py opens it.",
     "What does it return when the path is wrong?", "What does open_db() return when the database path is wrong?"),
    ("Who commands the ship in chapter 2?", "Captain Moreau commands the Albatross.",
     "Why does he leave the harbour at night?", "Why does Captain Moreau leave the harbour at night?"),
    ("Which option makes compression faster?", "The --fast option.",
     "How much memory does that use?", "How much memory does the --fast option use?"),
)


def _condense_turn(turns: str, follow_up: str) -> str:
    return f"Conversation:\n{turns}\nFollow-up question: {follow_up}"


def condense_messages(history: list[dict[str, str]], follow_up: str) -> list[dict[str, str]]:
    """Rewrite a chat follow-up into the standalone question it means (condense-question), for retrieval."""
    turns = "".join(f"{'User' if m['role'] == 'user' else 'Assistant'}: {clean_question(m['content']).strip()}\n"
                    for m in history)
    messages = [{"role": "system", "content": "You rewrite a follow-up question so that it can be understood without "
                                              "the conversation: each word that points back (it, he, she, they, him, "
                                              "her, that, this, there) becomes the name it stands for, usually what "
                                              "the last question asked about. Keep the other words. Reply with the "
                                              "rewritten question only; do not answer it."}]
    for question, answer, follow, rewritten in _CONDENSE_EXAMPLES:
        messages += [{"role": "user", "content": _condense_turn(f"User: {question}\nAssistant: {answer}\n", follow)},
                     {"role": "assistant", "content": rewritten}]
    return messages + [{"role": "user", "content": _condense_turn(turns, clean_question(follow_up))}]
