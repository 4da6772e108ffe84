"""The map's section summaries: which the map writes (engine/answer/map_writer.py, plan_parts: a chapter with two
sections or more gets a summary of each section long enough to need one, beside the chapter's own; nothing else
changes) and which an answer about each section of a part reads (engine/retrieval/whole_scope.py, read_sections)."""
from episodic_cli.engine.answer.map_writer import plan_parts
from episodic_cli.engine.budgets import SUMMARY_TOKENS
from episodic_cli.engine.documents.structure import encode
from episodic_cli.store.records import DocumentRecord, EventRecord
from episodic_cli.store.summaries import PART, SECTION

ROOM = 6000


def _doc() -> DocumentRecord:
    return DocumentRecord(path="/m/manual.md", display_path="/m/manual.md", kind="markdown", content_sha256="0" * 64,
                          n_tokens=1, n_events=1, n_pages=None, n_lines=1, ingest_seconds=0.0, id=1)


def _events(places: list[tuple[list, int]]) -> list[EventRecord]:
    """One event per (section path, tokens), in order."""
    out, at = [], 0
    for ordinal, (path, n) in enumerate(places):
        out.append(EventRecord(ordinal=ordinal, token_start=at, token_end=at + n, char_start=at, char_end=at + n,
                               page_start=None, page_end=None, line_start=ordinal + 1, line_end=ordinal + 1,
                               surprise_mean=0.0, surprise_max=0.0, text="x", id=ordinal + 1, document_id=1,
                               section=encode({"path": path})))
        at += n
    return out


CH1 = ["chapter", "1", "Using it"]
CH2 = ["chapter", "2", "The library"]
BIG = SUMMARY_TOKENS + 50


def test_a_chapters_sections_are_summarised_beside_it():
    events = _events([
        ([CH1], 120),                                        # the chapter's opening, before its first section
        ([CH1, ["section", "1.1", "Options"]], BIG),
        ([CH1, ["section", "1.1", "Options"]], BIG),        # a section of two events is one section
        ([CH1, ["section", "1.2", "Memory"]], BIG),
        ([CH1, ["section", "1.3", "Author"]], SUMMARY_TOKENS - 1),  # shorter than its summary: read as it is
        ([CH2], BIG),                                        # a chapter without sections
        ([CH2, ["section", "2.1", "Only one"]], BIG),        # ... or with one: nothing beside it
    ])
    parts = plan_parts(_doc(), events, ROOM)
    assert [(p.level, p.label, [e.ordinal for e in p.events]) for p in parts] == [
        (PART, 'ch. 1 "Using it"', [0, 1, 2, 3, 4]),
        (SECTION, 'ch. 1 "Using it", §1.1 "Options"', [1, 2]),
        (SECTION, 'ch. 1 "Using it", §1.2 "Memory"', [3]),
        (PART, 'ch. 2 "The library"', [5, 6]),
    ]
    assert len({p.key for p in parts}) == len(parts)


def test_a_chapter_read_in_chunks_keeps_its_sections():
    # A second chapter, as in every case here: a document's only chapter has its sections as parts (a README's title)
    events = _events([([CH1, ["section", "1.1", "A"]], 4000), ([CH1, ["section", "1.2", "B"]], 4000), ([CH2], BIG)])
    parts = plan_parts(_doc(), events, ROOM)
    assert [(p.level, p.chunk) for p in parts] == [(PART, 1), (PART, 2), (SECTION, None), (SECTION, None),
                                                   (PART, None)]


def test_a_section_longer_than_the_room_is_left_to_the_chapters_chunks():
    events = _events([([CH1, ["section", "1.1", "A"]], ROOM + 1), ([CH1, ["section", "1.2", "B"]], BIG),
                      ([CH2], BIG)])
    assert [(p.level, p.label) for p in plan_parts(_doc(), events, ROOM) if p.level == SECTION] == [
        (SECTION, 'ch. 1 "Using it", §1.2 "B"')]


def test_a_title_over_everything_is_left_out_of_the_labels():
    title = ["section", None, "Version"]  # a Texinfo manual's Top node over its chapters
    events = _events([([title], 50), ([title, CH1], BIG), ([title, CH1, ["section", "1.1", "A"]], BIG),
                      ([title, CH1, ["section", "1.2", "B"]], BIG), ([title, CH2], BIG)])
    assert [p.label for p in plan_parts(_doc(), events, ROOM)] == [
        '"Version"', 'ch. 1 "Using it"', 'ch. 1 "Using it", §1.1 "A"', 'ch. 1 "Using it", §1.2 "B"',
        'ch. 2 "The library"']


def test_each_section_reads_the_named_parts_sections_only(tmp_path):
    """whole_scope.read_sections, on a real store: the scope of chapter 2 also holds the event where chapter 1's
    last section runs into it, and that section's summary (of that event alone) is not one of chapter 2's."""
    import numpy as np

    from episodic_cli.engine.retrieval.whole_scope import read_sections
    from episodic_cli.store import Store
    from episodic_cli.store.summaries import SummaryRecord, part_key
    from test_store import IDENTITY, make_doc, unit

    rng = np.random.default_rng(48)
    st = Store.create_or_open(tmp_path / "s", IDENTITY)
    doc, events = make_doc("manual.txt", [f"passage {i}" for i in range(6)], rng)
    doc = st.replace_document(doc, events)
    vecs = unit(rng, 4)
    ch1, ch2 = ["chapter", "1", "Using it"], ["chapter", "2", "The library"]

    def put(level, path, label, first, last, n):
        st.summaries().put(SummaryRecord(
            level=level, key=part_key(doc.id, path), label=label, text=f"What {label} says.", model="m",
            content_sha256=doc.content_sha256, n_tokens=20, document_id=doc.id, first_ordinal=first,
            last_ordinal=last, embedding=vecs[n]))

    put(SECTION, [ch1, ["section", "1.2", "B"]], "§1.2", 1, 1, 0)   # the event that runs into chapter 2
    put(PART, [ch2], "ch. 2", 2, 5, 1)
    put(SECTION, [ch2, ["section", "2.1", "C"]], "§2.1", 2, 3, 2)
    put(SECTION, [ch2, ["section", "2.2", "D"]], "§2.2", 4, 5, 3)
    ids = {e.id for e in st.events_of(doc.id) if e.ordinal >= 1}
    reading = read_sections(st, ids, 10_000)
    assert [r.summary.label if r.summary else r.event.ordinal for r in reading.events] == [
        "ch. 2", 1, "§2.1", "§2.2"]  # the part's summary, then in order: the event no section of it covers
    assert [s.label for s in reading.stand_ins] == ["§2.1", "§2.2"]
    assert read_sections(st, ids, 20) is None  # what does not fit is read whole instead
    st.close()


def test_a_code_file_read_in_chunks_gives_its_document_the_whole_files_summary():
    """A code file over the room is read in chunks; its document's summary is made from the file's summary, which
    is keyed by the file's events' span (it was looked up under the empty path: no document summary was written)."""
    from episodic_cli.engine.answer.map_writer import MapPart, chunks_by_part, document_sources, whole_part

    code = DocumentRecord(path="/src/lexer.py", display_path="/src/lexer.py", kind="code", content_sha256="0" * 64,
                          n_tokens=1, n_events=1, n_pages=None, n_lines=1, ingest_seconds=0.0, id=1)
    events = _events([([], 4000), ([], 4000), ([], 4000)])
    parts = plan_parts(code, events, ROOM)
    assert [p.chunk for p in parts] == [1, 2, 3]
    whole = whole_part(chunks_by_part(parts)["None"])
    assert whole.key == MapPart(code, None, "", events).key
    assert document_sources(parts) == [whole.key]


def test_a_short_document_whose_one_event_holds_two_sections_is_read_as_a_whole():
    """From a review: such a document was one part named after the section most of it is in ("The Storm"), and the
    model was asked to summarise that section alone."""
    arrival, storm = ["section", None, "Arrival"], ["section", None, "The Storm"]
    (event,) = _events([([storm], 300)])
    event.section = encode({"path": [storm], "also": [[arrival]]})
    (part,) = plan_parts(_doc(), [event], ROOM)
    assert part.path is None and part.label == "lines 1-1"
    # a document of several parts keeps its sections' names, though events straddle their edges
    first, second = _events([([arrival], 300), ([storm], 300)])
    first.section = encode({"path": [arrival], "also": [[storm]]})
    assert [p.label for p in plan_parts(_doc(), [first, second], ROOM)] == ['"Arrival"', '"The Storm"']
