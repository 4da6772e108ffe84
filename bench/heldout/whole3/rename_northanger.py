"""The renamed book of the whole3 set: Northanger Abbey, chapters 1-8, every person renamed.

Input: the whole novel as r-cran-janeaustenr ships it (../whole/janeausten_rdata.py prints it as the variable
northangerabbey; fetch_docs.sh does both). Output: chapters 1-8 (up to the line "CHAPTER 9", exclusive), with

- every named person (and the families' fictional houses and villages: Fullerton, Northanger, Woodston, and the
  Thorpes' Putney) replaced by an invented name, by the fixed table below, applied in one pass of one regular
  expression (longest names first, so "Morlands" is not read as "Morland" + "s"); in chapters 1-8 the people
  are Catherine, her father Richard, her sisters Sally/Sarah and her brother James Morland; Mr and Mrs Allen;
  Mrs Thorpe and her children Isabella, John, Edward and William; Mr and Miss Tilney (Henry, Eleanor and the
  General are named only later: in the table all the same); the neighbours named in talk (the Skinners, Dr
  Skinner, the Parrys, George Parry), Mr King (the master of ceremonies), Miss Andrews, Captain Hunt, Freeman,
  Jackson of Oriel and Mrs Hughes;
- the title page replaced: title and byline ("by A Lady"; the byline names the book outright), the date "(1803)"
  and the author's "Advertisement" (it dates the book and tells its publishing history, which names it as surely
  as its people) dropped.

Real places (Bath, the Pump-room, the Upper and Lower Rooms, the Octagon Room, Pulteney Street, Milsom Street,
Edgar's Buildings, the Crescent, Lansdown, Tetbury, Oxford, Oriel, Christchurch, Merchant Taylors', Salisbury,
Wiltshire, Gloucestershire, London, Tunbridge) and real books and writers (Pope, Gray, Thompson, Shakespeare,
Milton, Prior, Sterne, the Spectator, Cecilia, Camilla, Belinda, Udolpho and its Laurentina, the Italian, Mrs
Radcliffe, the "horrid" novels, Sir Charles Grandison, Tom Jones, The Monk) are kept, as rename_pride.py and
../whole2/rename_persuasion.py keep theirs. The result is deterministic: same input bytes, same output bytes; the
script checks the input's sha256 and, after renaming, that no original name is left in the text.

    python3 rename_northanger.py northangerabbey.txt OUT.txt [--mapping MAPPING.json]
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "whole"))
from renaming import run  # noqa: E402

INPUT_SHA256 = "51f91bbe0517db8e65cff009b097ce0a1836124c4e0532ac19e6c0cad982abed"  # r-cran-janeaustenr 1.0.0-1
LAST_CHAPTER = 8

TITLE = ("NORTHANGER ABBEY", "A SEASON AT BATH")
BYLINE = ("Jane Austen (1803)", "A Lady")
DROPPED = ["(1803)", "ADVERTISEMENT BY THE AUTHORESS, TO NORTHANGER ABBEY (the whole paragraph)"]

# Original -> invented. People first, then the fictional houses, estates and villages.
PEOPLE = {
    "Morlands": "Hartwells", "Morland": "Hartwell",
    "Catherine": "Harriet", "Richard": "Jonathan", "Sally": "Patty", "Sarah": "Martha", "James": "Robert",
    "Allens": "Webleys", "Allen": "Webley",
    "Thorpes": "Crowthers", "Thorpe": "Crowther",
    "Isabella": "Sophia", "John": "Nicholas", "Edward": "Miles", "William": "Peter",
    "Tilneys": "Latimers", "Tilney": "Latimer", "Henry": "Arthur", "Eleanor": "Frances", "Frederick": "Lionel",
    "Skinners": "Pococks", "Skinner": "Pocock",
    "Parrys": "Fenwicks", "Parry": "Fenwick", "George": "Ralph",
    "King": "Lacey",
    "Andrews": "Crewe", "Hunt": "Marsden", "Freeman": "Hobday", "Jackson": "Pardoe", "Hughes": "Cardew",
}
PLACES = {
    "Fullerton": "Ashcombe", "Northanger": "Wrexcombe", "Woodston": "Hatherley", "Putney": "Brentmoor",
}


def table() -> dict[str, str]:
    plain = {**PEOPLE, **PLACES}
    plain.update({k.upper(): v.upper() for k, v in plain.items()})
    return plain


def first_chapters(text: str) -> str:
    end = re.search(rf"^CHAPTER {LAST_CHAPTER + 1}$", text, flags=re.M)
    return text[:end.start()].rstrip("\n") + "\n"


def rename(text: str) -> str:
    start = re.search(r"^CHAPTER 1$", text, flags=re.M)
    head = text[:start.start()]
    if not head.startswith(TITLE[0] + "\n") or BYLINE[0] not in head or "ADVERTISEMENT" not in head:
        sys.exit("unexpected title page")
    text = f"{TITLE[1]}\n\n\nby\n\n{BYLINE[1]}\n\n\n\n\n" + text[start.start():]
    plain = table()
    words = sorted(plain, key=len, reverse=True)
    return re.sub(r"\b(" + "|".join(map(re.escape, words)) + r")\b", lambda m: plain[m.group(1)], text)


def leftovers(text: str) -> list[str]:
    originals = set(table()) | {"Austen", "Jane", "Abbey", "ABBEY", "1803", "ADVERTISEMENT", "AUTHORESS"}
    return sorted({w for w in re.findall(r"\b[A-Za-z0-9]+\b", text) if w in originals})


def main() -> None:
    mapping = {"title": dict([TITLE]), "byline": dict([BYLINE]), "dropped": DROPPED, "people": PEOPLE,
               "places": PLACES}
    run(__doc__.splitlines()[0], INPUT_SHA256, lambda text: rename(first_chapters(text)), leftovers, mapping,
        LAST_CHAPTER)


if __name__ == "__main__":
    main()
