"""What a chat follow-up is searched as when the answer model's rewrite resolves nothing (engine/answer/condense.py).
The rewrite itself runs with the real model in tests/test_answer_model.py."""
import numpy as np

from episodic_cli.engine.answer.condense import search_for

HISTORY = [{"role": "user", "content": "How do I stop retrying after 5 attempts?"},
           {"role": "assistant", "content": "Pass stop=stop_after_attempt(5) to @retry."}]


def test_a_rewrite_that_names_the_referent_is_searched():
    assert search_for(HISTORY, "And what does it raise then?", "What does stop_after_attempt(5) raise then?") == \
        "What does stop_after_attempt(5) raise then?"


def test_a_follow_up_given_back_unchanged_is_searched_after_the_last_question():
    follow = "And how do I combine that with a time limit?"
    for rewrite in (follow, "and how do I combine that with a time limit", ""):
        assert search_for(HISTORY, follow, rewrite) == f"How do I stop retrying after 5 attempts? {follow}"


def test_a_follow_up_that_points_back_to_nothing_stands_alone():
    assert search_for(HISTORY, "Which versions of Python are supported?", "") == \
        "Which versions of Python are supported?"
    assert search_for([], "Does it quote the value?", "") == "Does it quote the value?"


def test_a_chain_of_follow_ups_is_searched_with_the_question_it_started_from():
    history = [{"role": "user", "content": "How do I set a breakpoint in ESS?"},
               {"role": "assistant", "content": "With ess-bp-set (C-c C-t b)."},
               {"role": "user", "content": "And how do I remove it again?"},
               {"role": "assistant", "content": "With ess-bp-kill (C-c C-t k)."}]
    follow = "What about all of them at once? Does that work for them too?"
    assert search_for(history, follow, "") == \
        f"How do I set a breakpoint in ESS? And how do I remove it again? {follow}"
    # a question that names its own subject ends the chain
    assert search_for(history[2:], follow, "") == f"And how do I remove it again? {follow}"


def test_an_ellipsis_given_back_unchanged_is_searched_after_the_last_question():
    history = [{"role": "user", "content": "Can Nettle make RSA signatures over a SHA-256 hash?"},
               {"role": "assistant", "content": "Yes: rsa_sha256_sign_tr."}]
    for follow in ("And with SHA-384?", "What about SHA-512?", "what if the key is weak?"):
        assert search_for(history, follow, follow) == f"{history[0]['content']} {follow}"
    # a why-question names its subject as often as not, and a glued search takes the last question's scope too
    assert search_for(history, "Why does git push fail?", "") == "Why does git push fail?"
    # a question that only mentions "and" inside stands alone
    assert search_for(history, "Which hashes and ciphers does Nettle have?", "") == \
        "Which hashes and ciphers does Nettle have?"


def test_a_chain_holds_at_most_the_last_two_questions():
    history = []
    for q in ("How do I set a breakpoint in ESS?", "And how do I remove it?", "And all of them?"):
        history += [{"role": "user", "content": q}, {"role": "assistant", "content": "..."}]
    assert search_for(history, "And from the menu?", "") == "And how do I remove it? And all of them? And from the menu?"


def test_a_follow_up_naming_its_own_place_is_searched_as_typed(tmp_path):
    """On every path (chat, `epi ask --continue`, the Python API): "And in chapter 4?" is not glued to a question
    about chapter 3, which would search both chapters. No model is loaded for it."""
    from episodic_cli.engine.workspace import Workspace

    ws = Workspace(None, str(tmp_path / "store"))
    history = [{"role": "user", "content": "What does chapter 3 say about Anne?"},
               {"role": "assistant", "content": "She leaves Kellynch."}]
    assert ws.condense(history, "And in chapter 4?") == "And in chapter 4?"
    assert "model" not in ws.__dict__
    ws.close()


def test_a_rewrite_after_one_that_failed_part_way_decodes_what_the_cache_lost(tmp_path):
    """The rewrite keeps the prompt prefix it shares with the last one in the cache; a prefill that failed part-way
    (injected) must not leave the next rewrite starting past a hole (llama.cpp refuses positions that skip)."""
    import pytest

    from tiny_gguf import write_tiny_model

    from episodic_cli.engine.answer.condense import Condenser
    from episodic_cli.engine.errors import EpiError
    from episodic_cli.engine.llama.backend import LlamaModel

    model = LlamaModel(write_tiny_model(tmp_path / "tiny.gguf"))
    history = [{"role": "user", "content": "How do I compress a folder with gzip?"},
               {"role": "assistant", "content": "Run tar -czf out.tar.gz folder/."}]
    condenser, fresh = Condenser(model), Condenser(model)
    try:
        condenser.rewrite(history, "And with bzip2?")
        prefill = condenser.session.prefill

        def fails_part_way(tokens, pos0=0):
            prefill(tokens[:1], pos0)  # the first token reaches the cache, then decoding fails
            raise EpiError("llama_decode failed")

        condenser.session.prefill = fails_part_way
        with pytest.raises(EpiError):  # another conversation: it shares less with the first prompt than the next does
            condenser.rewrite([{"role": "user", "content": "Which file lists the mirrors?"},
                               {"role": "assistant", "content": "MIRRORS."}], "What about xz?")
        condenser.session.prefill = prefill
        # the same text, and the same logits behind it (the tiny model's rewrite may be empty: the logits still
        # tell a cache with a hole or a stale token from a fresh one)
        assert condenser.rewrite(history, "What about xz?") == fresh.rewrite(history, "What about xz?")
        assert np.allclose(condenser.session.last_logits(), fresh.session.last_logits(), atol=1e-4)
    finally:
        condenser.close()
        fresh.close()
        model.close()


def test_a_conversation_too_long_for_the_rewrite_loses_its_oldest_turns_not_the_instructions(tmp_path):
    """Dense scripts take about a token a character: four long turns and a long follow-up outgrow the rewrite's
    context. The prompt was cut from the front, instructions first; now the oldest turns go."""
    from tiny_gguf import write_tiny_model

    from episodic_cli.engine.answer.condense import CONDENSE_TOKENS, Condenser
    from episodic_cli.engine.llama.backend import LlamaModel
    from episodic_cli.engine.prompt import condense_messages

    model = LlamaModel(write_tiny_model(tmp_path / "tiny.gguf"))
    condenser = Condenser(model)
    try:
        def length(history, follow_up) -> int:
            return len(model.tokenize(model.apply_chat_template(condense_messages(history, follow_up)), special=True))

        turns = [{"role": role, "content": "字" * 200} for role in ("user", "assistant") * 2]
        follow_up = "它" * 100 + "?"
        room = condenser.session.n_ctx - CONDENSE_TOKENS
        assert length(turns, follow_up) > room >= length(turns[-1:], follow_up)  # the case is the one meant
        decoded = []
        prefill = condenser.session.prefill
        condenser.session.prefill = lambda tokens, pos0=0: decoded.append((pos0, tokens)) or prefill(tokens, pos0)
        condenser.rewrite(turns, follow_up)
        instructions = model.tokenize(model.apply_chat_template(condense_messages([], "x")), special=True)[:40]
        assert decoded[0][0] == 0 and list(decoded[0][1][:40]) == list(instructions)
        # a follow-up that cannot fit even alone is searched without a rewrite
        assert condenser.rewrite(turns, "它" * 5000) == ""
    finally:
        condenser.close()
        model.close()
