"""The renamed book of the whole-scope sets: Pride and Prejudice, Volume I (chapters 1-23), every person renamed.

Input: the whole novel as r-cran-janeaustenr ships it (janeausten_rdata.py prints it; fetch_docs.sh does both).
Output: chapters 1-23 (the first volume: up to the line "Chapter 24", exclusive), with

- every named person (and the family's and friends' fictional houses and towns) replaced by an invented name,
  by the fixed table below, applied in one pass of one regular expression (longest names first, so "Bennets"
  is not read as "Bennet" + "s"); names split over a line break ("Lady\nCatherine") keep their break;
- the title and the author's name replaced (the byline names the book outright).

Real places (London, Kent, Hertfordshire, Derbyshire, St. James's, Cheapside, ...) and book titles (Fordyce's
Sermons) are kept. The result is deterministic: same input bytes, same output bytes; the script checks the
input's sha256 and, after renaming, that no original name is left in the text.

    python3 rename_pride.py prideprejudice.txt OUT.txt [--mapping MAPPING.json]
"""
from __future__ import annotations

import re
from renaming import run

INPUT_SHA256 = "dfc684d4f857fa938268f9ab9c5567b64bd0691251eca959644adeabe6287a4d"  # r-cran-janeaustenr 1.0.0-1
LAST_CHAPTER = 23

TITLE = ("PRIDE AND PREJUDICE", "THE DAUGHTERS OF BRACKENHOLME")
BYLINE = ("By Jane Austen", "By A Lady")

# Names that mean different people, told apart by the word before them (applied before the plain table).
CONTEXTUAL = [
    (r"Lady(\s+)Catherine", r"Lady\1Sophronia"),         # Lady Catherine de Bourgh (not Catherine Bennet)
    (r"Lady(\s+)Anne(\s+)Darcy", r"Lady\1Margery\2Tremaine"),  # Darcy's mother
    (r"Sir(\s+)William", r"Sir\1Gideon"),                 # Sir William Lucas (not William Collins)
    (r"Sir(\s+)Lewis", r"Sir\1Ralph"),                    # Sir Lewis de Bourgh
    (r"Mrs\.(\s+)Long\b", r"Mrs.\1Prosser"),              # "long" is also a word
    (r"Miss(\s+)King\b", r"Miss\1Oldroyd"),
    (r"to(\s+)Hill\b", r"to\1Sowerby"),                   # the Bennets' housekeeper ("speak to Hill")
]

# Original -> invented. People first, then the fictional houses and towns.
PEOPLE = {
    "Bennets": "Thornleys", "Bennet": "Thornley",
    "Elizabeth": "Rosamund", "Lizzy": "Rosie", "Eliza": "Rosa",
    "Jane": "Cecily", "Mary": "Judith", "Catherine": "Letitia", "Kitty": "Letty", "Lydia": "Phoebe",
    "Bingleys": "Ashworths", "Bingley": "Ashworth", "Charles": "Rupert",
    "Caroline": "Winifred", "Louisa": "Theodora", "Hursts": "Pellows", "Hurst": "Pellow",
    "Darcy": "Tremaine", "Fitzwilliam": "Aubrey", "Georgiana": "Honoria",
    "Wickham": "Garside", "George": "Lionel",
    "Collins": "Quarles", "William": "Josiah",
    "Lucases": "Fairlies", "Lucas": "Fairlie", "Charlotte": "Verity", "Maria": "Dorcas",
    "Bourgh": "Marsac",
    "Phillipses": "Goslings", "Phillips": "Gosling", "Phillip": "Gosling",
    "Gardiner": "Lockyer", "Forster": "Blount", "Denny": "Pargeter", "Carter": "Haverley",
    "Watson": "Bagot", "Clarke": "Pym", "Robinson": "Cheevers", "Morris": "Tibbs", "Jones": "Dabney",
    "Nicholls": "Moxon", "Jenkinson": "Truscott", "Grantley": "Pelham", "Richard": "Ned",
}
PLACES = {
    "Netherfield": "Oakhurst", "Longbourn": "Brackenholme", "Meryton": "Dunsby", "Pemberley": "Wrexley",
    "Rosings": "Helmsleigh", "Hunsford": "Coombe Ferris",
}


def table() -> dict[str, str]:
    plain = {**PEOPLE, **PLACES}
    plain.update({k.upper(): v.upper() for k, v in plain.items()})  # "WILLIAM COLLINS" signs a letter
    return plain


def first_volume(text: str) -> str:
    end = re.search(rf"^Chapter {LAST_CHAPTER + 1}$", text, flags=re.M)
    return text[:end.start()].rstrip("\n") + "\n"


def rename(text: str) -> str:
    text = text.replace(TITLE[0], TITLE[1], 1).replace(BYLINE[0], BYLINE[1], 1)
    for pattern, replacement in CONTEXTUAL:
        text = re.sub(pattern, replacement, text)
    plain = table()
    words = sorted(plain, key=len, reverse=True)
    return re.sub(r"\b(" + "|".join(map(re.escape, words)) + r")\b", lambda m: plain[m.group(1)], text)


def leftovers(text: str) -> list[str]:
    originals = set(table()) | {"Austen", "PREJUDICE"}
    found = {w for w in re.findall(r"\b[A-Za-z]+\b", text) if w in originals}
    found |= {m.group(0) for m in re.finditer(r"Mrs\.\s+Long\b|Miss\s+King\b|to\s+Hill\b", text)}
    return sorted(found)


def main() -> None:
    mapping = {"title": dict([TITLE]), "byline": dict([BYLINE]), "contextual": dict(CONTEXTUAL),
               "people": PEOPLE, "places": PLACES}
    run(__doc__.splitlines()[0], INPUT_SHA256, lambda text: rename(first_volume(text)), leftovers, mapping,
        LAST_CHAPTER)


if __name__ == "__main__":
    main()
