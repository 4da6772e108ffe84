"""Every number that sizes an answer context: its length, the room kept for the question and the answer, how much
of the archive an answer reads, and a layered answer's pool. How each value was chosen: docs/evaluation.md and
docs/layered.md.
"""
ANSWER_CONTEXT = 8192  # the answer context, or the model's training window if that is shorter
ANSWER_TOKENS = 256  # the longest answer
# The longest question epi takes, in characters. Retrieval embeds at most 256 word pieces of it (MiniLM's limit,
# about 1,000 characters of English) and the model prefills all of it before the first answer token: at ~4
# characters a token, 2,000 characters are ~500 tokens, about a second on 2 CPU cores; 20,000 took ~23 s. A longer
# question is refused, not cut: a pasted page usually ends with the actual question, which a cut would drop.
MAX_QUESTION_CHARS = 2000
QUESTION_ROOM = 768  # positions kept after the sources for the question part (and chat history)
# Beside a question longer than QUESTION_ROOM (2,000 characters of emoji are ~6,000 tokens): what the prompt adds to
# its words (system rules, chat template, a heading per source), so that the sources are cut to the room left.
PROMPT_OVERHEAD = 256
MIN_SOURCE_ROOM = 256  # fewer positions left for sources than this: the question is refused as too long for them
EVIDENCE_BUDGET = 3072  # tokens of retrieved events an answer reads at most
# A question reading whole events prefills those without a block for the answer model at most this long; the rest
# are read as passages that match the question, or left out (engine/retrieval/cold_reading.py; docs/heldout.md,
# "Cold answers").
COLD_PREFILL_SECONDS = 10.0
WARM_RUN_TOKENS = EVIDENCE_BUDGET  # `epi warm` prefills runs of consecutive events of about this many tokens
# Hits per question (`-k`), before neighbours: k=5 answered as well as k=3 on every held-out set and better on one
# (docs/evaluation.md, "k=5 instead of 3").
DEFAULT_K = 5

LAYER_BUDGET = EVIDENCE_BUDGET  # tokens of a layered pool each layer sees: what kv mode reads at most
LAYERED_POOL_K = 12  # hits in a layered pool per answer context's room of it (before neighbours)
MAX_POOL = 192  # events in a layered pool (a sequence each; llama.cpp allows 256)
# Retrieval's own events, which every layer sees first (the anchors), fill at most two thirds of a layer's budget,
# so that at least a third is each layer's own choice (docs/layered.md).
LAYERED_ANCHOR_TOKENS = 2 * LAYER_BUDGET // 3
# `--pool`: above a layer's budget and the share it chooses (a smaller pool is seen whole by every layer), at most
# what a 2-core laptop loads in a few seconds (~23 KB a token with the bundled model: ~1.1 GB)
POOL_TOKENS_RANGE = (LAYER_BUDGET + LAYER_BUDGET // 3, 48_000)

# Questions about a part as a whole (engine/retrieval/question_kind.py) read it whole from its blocks in a context of
# this many positions (or the model's training window, if shorter), and write longer answers. Memory, load time and
# decode speed at 8k/16k/24k: docs/benchmarks.md, "Answer context".
WHOLE_CONTEXT = 16384
WHOLE_ANSWER_TOKENS = 384
# A question about each part in turn ("what does each chapter cover?") is answered a short line a part: room for this
# many tokens a part summary read, from WHOLE_ANSWER_TOKENS up to the cap (about two minutes of decoding on 2 cores).
EVERY_PART_LINE_TOKENS = 24
EVERY_PART_ANSWER_TOKENS = 1024
# The map (engine/answer/map_writer.py): a summary's longest length, and the size of the parts a document without
# chapters, sections or files is cut into.
SUMMARY_TOKENS = 200
MAP_PART_TOKENS = 6000
# An overview question reads at most this many characters of the map's summaries (about 4 characters a token).
OVERVIEW_CHARS = 4 * 6000
# A document or folder asked about by its name (retrieval/named_whole.py) is found as any question is, within that
# document or folder, its own opening (its README's first events, up to this many tokens) ranked first: on three
# blind sets no worse than before, where its map answered worst (docs/heldout.md, "A whole named by its name").
NAMED_OPENING_TOKENS = 512
# A lookup answered from whole blocks whose own words no sentence of the sources holds (evidence.support) is answered
# again from the passages that match the question best, read as text, in at most SECOND_LOOK_TOKENS: what a cold
# question reads in COLD_PREFILL_SECONDS at the bundled model's ~60 tokens/s on 2 cores, the room cold answers were
# measured with (ask_run.second_look; docs/heldout.md, "A second look"). The default of AskOptions.second_look
# (`epi ask --no-second-look`).
SECOND_LOOK = True
SECOND_LOOK_TOKENS = 600
