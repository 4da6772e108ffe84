"""The planner (engine/ask_plan.py) on plain data: no model, no store. Each plan lists the ways today's answers try,
in the order they try them, with a reason for each."""
from episodic_cli.engine.ask_options import AskOptions, AskRequest
from episodic_cli.engine.ask_plan import WAYS, Catalogue, Plan, plan, seeks_named_whole
from episodic_cli.engine.retrieval.question_kind import QuestionKind
from episodic_cli.engine.retrieval.scope import parse

MAPPED = Catalogue(has_map=True)


def planned(question: str, catalogue: Catalogue = MAPPED, titled: bool = False, **choices) -> Plan:
    options = AskRequest.build(question, **choices).options
    return plan(question, options, parse(question), titled, catalogue)


def test_a_chapter_question_plans_the_chapter_whole_then_a_lookup():
    p = planned("Summarise chapter 2.")
    assert p.kind is QuestionKind.WHOLE and p.ways == ("whole", "lookup") and not p.boost
    assert all(s.reason for s in p.steps) and p.steps[0].gives_way and p.steps[-1].warning is None


def test_each_part_of_a_chapter_plans_its_section_summaries_first():
    assert planned("What does each section of chapter 2 cover?").ways == ("each_part", "whole", "lookup")


def test_a_named_whole_plans_its_boost_and_no_step_of_its_own():
    p = planned("What does epi do?", Catalogue(named="README.md", has_map=True))
    assert p.boost and p.named == "README.md" and "named_whole" not in p.ways
    assert p.steps[0].reason.endswith("(within README.md, its opening ranked first)")


def test_a_named_whole_with_read_whole_or_overview_is_a_fallback_step():
    whole = planned("What does epi do?", Catalogue(named="README.md", has_map=True), read="whole")
    assert not whole.boost and whole.ways == ("whole", "named_whole", "lookup")
    overview = planned("What does epi do?", Catalogue(named="README.md", has_map=True), read="overview")
    assert overview.ways == ("overview", "named_whole", "lookup") and "README.md" in overview.steps[0].reason


def test_a_small_model_plans_a_lookup_only():
    p = planned("Summarise chapter 2.", Catalogue(has_map=True, reads_whole_parts=False))
    assert p.kind is QuestionKind.LOOKUP and p.ways == ("lookup",) and "too small" in p.steps[0].reason
    assert planned("Summarise chapter 2.", layered=True).ways == ("lookup",)


def test_read_whole_plans_the_part_then_a_lookup_that_says_why():
    p = planned("Where is the key?", read="whole")
    assert p.ways == ("whole", "lookup") and p.steps[0].reason.startswith("--read whole")
    assert "--read whole reads the part a question names" in p.steps[-1].warning
    assert planned("Summarise chapter 2.").steps[-1].warning is None  # chosen, not asked for: no warning


def test_explain_plans_the_enclosing_definitions_then_a_lookup():
    p = planned("Explain how the retry policy works.")
    assert p.kind is QuestionKind.EXPLAIN and p.ways == ("explain", "lookup")


def test_an_overview_without_a_map_is_skipped_and_says_why():
    p = planned("What is this book about?", Catalogue(has_map=False))
    assert p.kind is QuestionKind.OVERVIEW and p.ways == ("overview", "lookup")
    assert p.steps[0].skipped and "no map yet" in p.steps[0].warning
    assert planned("What is this book about?").steps[0].skipped is None


def test_a_lookup_plans_a_lookup_and_outcomes_name_what_answered():
    p = planned("Where did Orla hide the key?")
    assert p.kind is QuestionKind.LOOKUP and p.ways == ("lookup",)
    whole = planned("Summarise chapter 2.")
    assert [o["outcome"] for o in whole.outcomes(1)] == ["gave way", "answered"]
    assert whole.outcomes(1)[0]["why_not"] == whole.steps[0].gives_way
    assert [o["outcome"] for o in whole.outcomes(0)] == ["answered", "not tried"]
    assert {s.way for q in ("Summarise chapter 2.", "Explain it.", "What is this about?") for s in planned(q).steps} \
        <= set(WAYS)


def test_a_named_whole_is_sought_only_where_it_may_be_read():
    assert seeks_named_whole(AskOptions(), parse("What does epi do?"), False)
    assert not seeks_named_whole(AskOptions(), parse("What happens in chapter 2?"), False)  # a place of its own
    assert not seeks_named_whole(AskOptions(), parse("What does epi do?"), True)
    assert not seeks_named_whole(AskOptions(layered=True), parse("What does epi do?"), False)
    assert not seeks_named_whole(AskOptions(kind=QuestionKind.LOOKUP), parse("What does epi do?"), False)
