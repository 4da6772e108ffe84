"""The renamed book of the whole2 sets: Persuasion, Volume I (chapters 1-12), every person renamed.

Input: the whole novel as r-cran-janeaustenr ships it (../whole/janeausten_rdata.py prints it; fetch_docs.sh
does both). Output: chapters 1-12 (the first volume: up to the line "Chapter 13", exclusive; the line
"(End of volume one.)" that closes chapter 12 stays), with

- every named person (and the families' fictional houses, estates and villages: Kellynch, Uppercross, Winthrop,
  Monkford, South Park) replaced by an invented name, by the fixed table below, applied in one pass of one
  regular expression (longest names first, so "Musgroves" is not read as "Musgrove" + "s"); names split over a
  line break keep their break;
- the invented navy ships (Laconia, Asp, Grappler) and the invented peerage (Lord St Ives, "the Strafford
  family") renamed as well, since they name the book as surely as its people;
- the title and the author's name replaced (the byline names the book outright) and the date line "(1818)"
  dropped (the Pride and Prejudice text of the same package has none).

Real places (Bath, London, Lyme, the Cobb, Charmouth, Taunton, Plymouth, Somersetshire, ...), real people and
books (Charles II, Dugdale, Tattersall's, Mr Scott, Lord Byron, Marmion, The Giaour, Prior's "Emma ... her
Henry") are kept, as rename_pride.py keeps London, Kent and Fordyce's Sermons. The result is deterministic: same
input bytes, same output bytes; the script checks the input's sha256 and, after renaming, that no original name
is left in the text.

    python3 rename_persuasion.py persuasion.txt OUT.txt [--mapping MAPPING.json]
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "whole"))
from renaming import run  # noqa: E402

INPUT_SHA256 = "8061549557aebd2fd6e353d18d9197cb707029112bd52d4d8b174583a925848a"  # r-cran-janeaustenr 1.0.0-1
LAST_CHAPTER = 12

TITLE = ("Persuasion", "The Tenants of Marlcombe")
BYLINE = ("Jane Austen", "A Lady")
DATE_LINE = "\n\n(1818)\n"  # dropped (replaced by a single newline)

# Real people kept verbatim although they contain a renamed word (protected from the plain table).
KEEP = ["Charles II"]

# Multi-word names, told apart by their neighbours (applied before the plain table).
CONTEXTUAL = [
    (r"South(\s+)Park", r"Ashgrove\1Park"),        # Lady Elliot's father's seat, "South Park, ... Gloucester"
    (r"Lord(\s+)St(\s+)Ives", r"Lord\1Polwhele"),  # an invented peer (not the town)
]

# Original -> invented. People first, then the fictional houses, estates and villages, then ships and peerage.
PEOPLE = {
    "Elliots": "Lisles", "Elliot": "Lisle",
    "Walter": "Everard", "William": "Giles",
    "Elizabeths": "Julianas", "Elizabeth": "Juliana",
    "Anne": "Hester",
    "Marys": "Matildas", "Mary": "Matilda",
    "Stevenson": "Ledyard", "James": "Ambrose",
    "Russell": "Dampier",
    "Shepherd": "Pinnock", "John": "Samuel",
    "Clay": "Penrose", "Penelope": "Susannah",
    "Musgroves": "Treshams", "Musgrove": "Tresham",
    "Charles": "Humphrey", "Henrietta": "Philippa", "Louisa": "Amabel",
    "Richard": "Jeremy", "Dick": "Jerry",
    "Crofts": "Hawleys", "Croft": "Hawley", "Sophia": "Margaret", "Sophy": "Meg",
    "Wentworth": "Ashby", "Frederick": "Gilbert", "Edward": "Stephen",
    "Harvilles": "Tremletts", "Harville": "Tremlett", "Fanny": "Nancy",
    "Benwick": "Purefoy",
    "Hayters": "Blaydons", "Hayter": "Blaydon",
    "Shirley": "Cheyne",
    "Robinson": "Tozer",
    "Jemima": "Betsy", "Mackenzie": "Rudd",
    "Pooles": "Fanshawes", "Spicers": "Marwoods",
    "Baldwin": "Gedge", "Basil": "Jasper", "Morley": "Kettering", "Trent": "Hext", "Grierson": "Fettiplace",
}
PLACES = {
    "Kellynch": "Marlcombe", "Uppercross": "Fernleigh", "Winthrop": "Hatchcombe", "Monkford": "Friarscote",
}
OTHER = {
    "Laconia": "Illyria", "Asp": "Kestrel", "Grappler": "Resolute",  # ships
    "Strafford": "Ferrers",                                          # "nothing to do with the ... family"
}


def table() -> dict[str, str]:
    plain = {**PEOPLE, **PLACES, **OTHER}
    plain.update({k.upper(): v.upper() for k, v in plain.items()})  # "ELLIOT OF KELLYNCH HALL"
    return plain


def first_volume(text: str) -> str:
    end = re.search(rf"^Chapter {LAST_CHAPTER + 1}$", text, flags=re.M)
    return text[:end.start()].rstrip("\n") + "\n"


def rename(text: str) -> str:
    if not text.startswith(TITLE[0] + "\n") or DATE_LINE not in text[:200] or BYLINE[0] not in text[:200]:
        sys.exit("unexpected title page")
    text = TITLE[1] + text[len(TITLE[0]):]
    text = text.replace(BYLINE[0], BYLINE[1], 1).replace(DATE_LINE, "\n", 1)
    for i, phrase in enumerate(KEEP):
        text = text.replace(phrase, f"\x00{i}\x00")
    for pattern, replacement in CONTEXTUAL:
        text = re.sub(pattern, replacement, text)
    plain = table()
    words = sorted(plain, key=len, reverse=True)
    text = re.sub(r"\b(" + "|".join(map(re.escape, words)) + r")\b", lambda m: plain[m.group(1)], text)
    for i, phrase in enumerate(KEEP):
        text = text.replace(f"\x00{i}\x00", phrase)
    return text


def leftovers(text: str) -> list[str]:
    for phrase in KEEP:
        text = text.replace(phrase, "")
    originals = set(table()) | {"Austen", "Jane", "Persuasion", "Ives", "1818"}
    found = {w for w in re.findall(r"\b[A-Za-z0-9]+\b", text) if w in originals}
    found |= {m.group(0) for m in re.finditer(r"South\s+Park", text)}
    return sorted(found)


def main() -> None:
    mapping = {"title": dict([TITLE]), "byline": dict([BYLINE]), "dropped": ["(1818)"], "kept": KEEP,
               "contextual": dict(CONTEXTUAL), "people": PEOPLE, "places": PLACES, "ships_and_peerage": OTHER}
    run(__doc__.splitlines()[0], INPUT_SHA256, lambda text: rename(first_volume(text)), leftovers, mapping,
        LAST_CHAPTER)


if __name__ == "__main__":
    main()
