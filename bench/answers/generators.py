"""Deterministic test-data generators for `bench/answers/eval.py` (same seed -> byte-identical documents and questions).

Haystack: the prose of the Python Language Reference and library topics that CPython ships as
`pydoc_data.topics` (what `help('FOR')` prints). It is real technical prose, present on every CPython install,
under the PSF License (free to copy and redistribute). Its sentences are cleaned and shuffled with the seed, the
way NITH shuffles PG19 sentences, and cycled (reshuffled per pass) when a haystack needs more than the ~100k
tokens the corpus holds, so the 1M/10M runs repeat sentences but never in the same order.

Generators (see bench/README.md for the recipes and their sources):
- `needle_document`: passkey needles and NITH sentence-completion needles, one unique needle per depth, all in
  one document per length (ingest is the expensive step: one ingest serves every depth).
- `factrecall_document`: LV-Eval FactRecall as EpMAN Figure 2 builds it: a gold fact whose entity is renamed
  (KPR) so prior knowledge gives the wrong answer, plus n confusing facts (CFI) at random depths.
- `nqd_corpus`: NQd-style: N short documents on one template, each one the gold for its own question and a
  same-template distractor for every other, so the gold position sweeps with the question.
"""
from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

GENERATOR_VERSION = 1

TokenCounter = Callable[[str], int]


def approx_tokens(text: str) -> int:
    return max(1, len(text) // 4)


@dataclass
class Question:
    qid: str
    suite: str            # "passkey" | "nith" | "factrecall" | "nqd"
    question: str
    answer: str           # the gold answer
    gold_text: str        # the sentence the answer comes from; source recall = it lies inside a retrieved source
    document: str         # file name of the document holding gold_text
    params: dict = field(default_factory=dict)  # length, depth, n_confusers, position, ...

    def as_json(self) -> dict:
        return asdict(self)


@dataclass
class GeneratedSet:
    name: str
    documents: dict[str, str]     # file name -> text (plain ASCII)
    questions: list[Question]
    params: dict


# -- haystack -----------------------------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[a-z0-9\)][.!?])\s+(?=[A-Z])")


def corpus_sentences() -> list[str]:
    """Clean prose sentences of pydoc_data.topics, in a stable order (sorted topic keys)."""
    from pydoc_data.topics import topics

    out: list[str] = []
    for key in sorted(topics):
        for para in re.split(r"\n\s*\n", topics[key]):
            lines = para.splitlines()
            if any(l.lstrip().startswith((">>>", "...")) or "::=" in l for l in lines):  # code and grammar rules
                continue
            text = " ".join(l.strip() for l in lines)
            for s in _SENTENCE_END.split(text):
                s = s.strip()
                words = s.split()
                if not 6 <= len(words) <= 60 or not s.isascii() or not s[0].isupper() or s[-1] not in ".!?":
                    continue
                if sum(c in "*`=[]{}|<>_" for c in s) > 4 or "***" in s or "---" in s:
                    continue
                out.append(s)
    return list(dict.fromkeys(out))  # de-duplicated, order kept


class Haystack:
    """An endless, seeded stream of shuffled corpus sentences."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.base = corpus_sentences()
        self.pool: list[str] = []

    def next(self) -> str:
        if not self.pool:
            self.pool = self.base[:]
            self.rng.shuffle(self.pool)
        return self.pool.pop()

    def take(self, n_tokens: int, count: TokenCounter) -> list[tuple[str, int]]:
        out, total = [], 0
        while total < n_tokens:
            s = self.next()
            t = count(s) + 1
            out.append((s, t))
            total += t
        return out


def assemble(sentences: list[str], per_paragraph: int = 7) -> str:
    paras = [" ".join(sentences[i : i + per_paragraph]) for i in range(0, len(sentences), per_paragraph)]
    return "\n\n".join(paras) + "\n"


def plant(filler: list[tuple[str, int]], inserts: list[tuple[float, str]]) -> list[str]:
    """Insert each (depth in [0, 1], sentence) before the filler sentence at that fraction of the filler's tokens."""
    total = sum(t for _, t in filler)
    cum, positions = 0, []
    for _, t in filler:
        positions.append(cum / total)
        cum += t
    out: list[str] = []
    pending = sorted(inserts, key=lambda x: x[0])
    j = 0
    for i, (s, _) in enumerate(filler):
        while j < len(pending) and pending[j][0] <= positions[i]:
            out.append(pending[j][1])
            j += 1
        out.append(s)
    out.extend(p[1] for p in pending[j:])
    return out


# -- needle / passkey / NITH --------------------------------------------------------------------------------------

VAULTS = ["amber", "cobalt", "crimson", "ivory", "jade", "saffron", "slate", "umber", "violet", "teal", "ochre",
          "silver", "coral", "indigo", "russet", "olive", "pearl", "scarlet", "bronze", "azure"]
CITIES = ["San Francisco", "Lisbon", "Oslo", "Nairobi", "Montreal", "Kyoto", "Valparaiso", "Tbilisi", "Hobart",
          "Ljubljana", "Cartagena", "Reykjavik", "Tallinn", "Marrakesh", "Porto", "Hanoi", "Bergen", "Cusco",
          "Galway", "Trieste"]
ACTIVITIES = [
    "eat a sandwich and sit in Dolores Park on a sunny day",  # Kamradt's original needle
    "ride the yellow tram uphill and drink cold lemonade at noon",
    "swim in the fjord before breakfast and then read in the library",
    "watch the giraffes at dusk from the edge of the national park",
    "skate on the frozen canal and buy maple taffy from a stall",
    "walk under the red gates at dawn and eat grilled eel for lunch",
    "climb the painted hills by funicular and paint the harbour",
    "soak in the sulphur baths and share warm cheese bread with friends",
    "count penguins on the beach and drink cider by the fireplace",
    "cross the dragon bridge at midnight and listen to street violins",
    "dance in the old walled city and eat fried fish by the sea",
    "bathe in the blue lagoon under the green northern lights",
    "climb the medieval towers and taste dark rye bread with honey",
    "bargain for lanterns in the souk and sip mint tea on a roof",
    "cross the iron bridge at sunset and taste sweet port wine",
    "drink egg coffee by the lake and ride a scooter through the rain",
    "take the cable car up the mountain and eat fish soup at the top",
    "walk the stone steps to the fortress and chew coca leaves slowly",
    "sing in a crowded pub and swim in the cold Atlantic at noon",
    "drink espresso on the long pier and watch the winds chase the boats",
]


def needle_document(length: int, depths: list[float], seed: int, count: TokenCounter = approx_tokens,
                    nith: bool = True) -> GeneratedSet:
    """One document of ~`length` tokens with, at each depth, a unique passkey needle and (if `nith`) a unique NITH
    completion needle. Questions: one per needle."""
    rng = random.Random(seed * 1_000_003 + length)
    name = f"needle_{length}.txt"
    hay = Haystack(seed * 7919 + length)
    inserts, questions = [], []
    vaults = rng.sample(VAULTS, len(depths))
    order = rng.sample(range(len(CITIES)), len(depths))
    for i, depth in enumerate(depths):
        key = f"{rng.randrange(10000, 100000)}"
        vault = vaults[i]
        passkey = f"The pass key for the {vault} vault is {key}. Remember it. {key} is the pass key for the {vault} vault."
        questions.append(Question(
            f"passkey-{length}-{depth:.2f}", "passkey", f"What is the pass key for the {vault} vault?", key, passkey,
            name, {"length": length, "depth": depth}))
        inserts.append((depth, passkey))
        if nith:
            city, act = CITIES[order[i]], ACTIVITIES[order[i]]
            needle = f"The best thing to do in {city} is {act}."
            questions.append(Question(
                f"nith-{length}-{depth:.2f}", "nith",
                f"Complete this sentence from the documents: The best thing to do in {city} is", act, needle, name,
                {"length": length, "depth": depth}))
            inserts.append((depth + 1e-9, needle))
    budget = length - sum(count(s) + 1 for _, s in inserts)
    text = assemble(plant(hay.take(max(budget, 64), count), inserts))
    return GeneratedSet(f"needle-{length}", {name: text}, questions,
                        {"length": length, "depths": depths, "seed": seed, "nith": nith})


# -- FactRecall with CFI + KPR (EpMAN Figure 2) --------------------------------------------------------------------

# (true actor, KPR replacement, franchise, title, confusers: same franchise, shared question words, other roles/titles)
FACT_FAMILIES = [
    ("Tom Holland", "Wayne Rooney", "Marvel", "No Way Home", [
        "Tom Hiddleston played Loki in the Marvel movie Ragnarok.",
        "Zendaya played MJ in the Marvel movie No Way Home.",
        "Chris Pratt played the main character in the Marvel movie Guardians of the Galaxy.",
        "Benedict Cumberbatch played Doctor Strange in the Marvel movie No Way Home.",
        "Tom Holland played the main character in the Marvel movie Homecoming.",
    ]),
    ("Daniel Radcliffe", "Serena Williams", "Harry Potter", "The Philosopher's Stone", [
        "Emma Watson played Hermione in the Harry Potter movie The Philosopher's Stone.",
        "Alan Rickman played Snape in the Harry Potter movie The Half-Blood Prince.",
        "Rupert Grint played the best friend of the main character in the Harry Potter movie The Philosopher's Stone.",
        "Ralph Fiennes played Voldemort in the Harry Potter movie The Goblet of Fire.",
        "Daniel Radcliffe played the main character in the Harry Potter movie The Deathly Hallows.",
    ]),
    ("Elijah Wood", "Usain Bolt", "Lord of the Rings", "The Fellowship of the Ring", [
        "Ian McKellen played Gandalf in the Lord of the Rings movie The Fellowship of the Ring.",
        "Viggo Mortensen played the main character in the Lord of the Rings movie The Return of the King.",
        "Sean Astin played Sam in the Lord of the Rings movie The Fellowship of the Ring.",
        "Orlando Bloom played Legolas in the Lord of the Rings movie The Two Towers.",
        "Elijah Wood played the main character in the Lord of the Rings movie The Two Towers.",
    ]),
    ("Mark Hamill", "Marie Curie", "Star Wars", "A New Hope", [
        "Harrison Ford played Han Solo in the Star Wars movie A New Hope.",
        "Carrie Fisher played Leia in the Star Wars movie The Empire Strikes Back.",
        "Daisy Ridley played the main character in the Star Wars movie The Force Awakens.",
        "Alec Guinness played Obi-Wan in the Star Wars movie A New Hope.",
        "Mark Hamill played the main character in the Star Wars movie Return of the Jedi.",
    ]),
    ("Johnny Depp", "Roger Federer", "Pirates of the Caribbean", "The Curse of the Black Pearl", [
        "Orlando Bloom played Will Turner in the Pirates of the Caribbean movie The Curse of the Black Pearl.",
        "Keira Knightley played Elizabeth in the Pirates of the Caribbean movie Dead Man's Chest.",
        "Geoffrey Rush played Barbossa in the Pirates of the Caribbean movie The Curse of the Black Pearl.",
        "Javier Bardem played the villain in the Pirates of the Caribbean movie Dead Men Tell No Tales.",
        "Johnny Depp played the main character in the Pirates of the Caribbean movie On Stranger Tides.",
    ]),
]


def factrecall_document(length: int, n_confusers: list[int], seed: int, count: TokenCounter = approx_tokens
                        ) -> GeneratedSet:
    """One document of ~`length` tokens; family i gets n_confusers[i] CFI sentences. Gold and confusers sit at
    random depths (interleaved with haystack, Figure 2: Doc1, gold(KPR), Doc2, CF1, Doc3, CF2 ...)."""
    if len(n_confusers) > len(FACT_FAMILIES):
        raise ValueError(f"at most {len(FACT_FAMILIES)} fact families")
    rng = random.Random(seed * 31 + length)
    name = f"factrecall_{length}.txt"
    inserts, questions = [], []
    for (true_actor, renamed, franchise, title, confusers), n in zip(FACT_FAMILIES, n_confusers):
        gold = f"{renamed} played the main character in the {franchise} movie {title}."
        inserts.append((rng.uniform(0.05, 0.95), gold))
        for c in rng.sample(confusers, n):
            inserts.append((rng.uniform(0.02, 0.98), c))
        questions.append(Question(
            f"factrecall-{length}-cfi{n}", "factrecall",
            f"Who played the main character in the {franchise} movie {title}?", renamed, gold, name,
            {"length": length, "n_confusers": n, "prior_answer": true_actor}))
    hay = Haystack(seed * 104729 + length)
    budget = length - sum(count(s) + 1 for _, s in inserts)
    text = assemble(plant(hay.take(max(budget, 64), count), inserts))
    return GeneratedSet(f"factrecall-{length}", {name: text}, questions,
                        {"length": length, "n_confusers": n_confusers, "seed": seed})


# -- NQd-style multi-document distractors --------------------------------------------------------------------------

_TOWN_A = ["Harrow", "Kestrel", "Marl", "Thorn", "Ashen", "Bram", "Cold", "Dun", "Elder", "Fen", "Gull", "Hollin",
           "Iver", "Larch", "Moss", "Nettle", "Oak", "Pike", "Quill", "Rook", "Sedge", "Tarn", "Wold", "Yarrow", "Brack"]
_TOWN_B = ["mere", "ford", "wick", "stead", "combe", "haven", "holm", "by", "ton", "well"]
_FIRST = ["Adela", "Bertram", "Corin", "Delphine", "Edmund", "Fenella", "Gideon", "Hester", "Ivo", "Jocasta",
          "Lucan", "Mirela", "Niall", "Odile", "Piers", "Rosalind", "Silas", "Tamsin", "Ulric", "Verity"]
_LAST = ["Vorn", "Ashcombe", "Blackwood", "Carrow", "Dunmore", "Everleigh", "Fairweather", "Gresham", "Hollis",
         "Ingram", "Kettering", "Lockhart", "Merrow", "Northcote", "Oakes", "Penrose", "Quarrier", "Ravensworth"]


def nqd_corpus(n_docs: int, positions: list[int], seed: int, doc_tokens: int = 160,
               count: TokenCounter = approx_tokens) -> GeneratedSet:
    """`n_docs` documents of ~`doc_tokens` tokens, each stating who founded one town (same template everywhere).
    Questions ask about the towns of the documents at `positions` (the gold position in document order)."""
    rng = random.Random(seed * 92821 + n_docs)
    towns = rng.sample([a + b for a in _TOWN_A for b in _TOWN_B], n_docs)
    founders = rng.sample([f"{f} {l}" for f in _FIRST for l in _LAST], n_docs)
    years = [rng.randrange(1150, 1890) for _ in range(n_docs)]
    hay = Haystack(seed * 15485863 + n_docs)
    docs, questions = {}, []
    for i in range(n_docs):
        fact = f"The town of {towns[i]} was founded in {years[i]} by {founders[i]}."
        filler = hay.take(doc_tokens - count(fact), count)
        text = assemble(plant(filler, [(rng.uniform(0.0, 1.0), fact)]), per_paragraph=100)
        name = f"nqd_{n_docs}_doc{i:02d}.txt"
        docs[name] = text
        if i in positions:
            questions.append(Question(
                f"nqd-{n_docs}-pos{i}", "nqd", f"Who founded the town of {towns[i]}?", founders[i], fact, name,
                {"n_docs": n_docs, "position": i}))
    return GeneratedSet(f"nqd-{n_docs}", docs, questions, {"n_docs": n_docs, "positions": positions, "seed": seed,
                                                            "doc_tokens": doc_tokens})
