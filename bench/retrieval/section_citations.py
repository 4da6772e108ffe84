"""Do questions that name a chapter or section cite that chapter or section? (issue 14's check; docs/heldout.md)

For every question of the held-out sets that name a place (`bench/heldout/sections-*.json`, whose questions carry
the chapter/section they name in `names`), retrieval runs as `epi ask` runs it (the question's scope, k=3, +-1
neighbour) on the store bench/answers/heldout.py built for the set of the same documents (`book` for the Vim manual,
`pdf-manual` / `pdf-spec` for the two PDFs). Printed per question and in total: whether retrieval was restricted to
a place, whether the best hit's citation (its section as `epi ask` shows it) names the section asked about, whether
any cited source does, and whether the gold excerpt was read. No answers are generated (retrieval only).

    python bench/retrieval/section_citations.py [--stores DIR]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "answers"))
from eval import covers  # noqa: E402

from episodic_cli.engine.paths import cache_dir  # noqa: E402
from episodic_cli.engine.retrieval.retrieve import relevance_order  # noqa: E402
from episodic_cli.engine.documents.structure import describe  # noqa: E402
from episodic_cli.engine.workspace import Workspace  # noqa: E402

HERE = Path(__file__).resolve().parent
STORE_OF = {"usr_0": "book", "libtasn1": "pdf-manual", "shared-mime-info": "pdf-spec"}


def named_number(names: dict) -> str | None:
    """The section (else chapter) number the question names, without leading zeros: "03.5" -> "3.5"."""
    for key in ("section", "chapter"):
        m = re.match(r"\s*(?:chapter\s+)?(\d+(?:\.\d+)*)", names.get(key) or "", re.I)
        if m:
            return ".".join(str(int(p)) for p in m.group(1).split("."))
    return None


def cites(citation: str | None, number: str) -> bool:
    """Whether a citation (`ch. 3 "Moving around", § 3.5 "..."`) names `number` as a section or chapter."""
    found = {".".join(str(int(p)) for p in n.split(".")) for n in re.findall(r"\d+(?:\.\d+)*", citation or "")}
    return number in found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stores", type=Path, default=cache_dir() / "heldout")
    args = ap.parse_args()
    rows = []
    workspaces: dict[str, tuple[Workspace, object]] = {}
    for path in sorted((HERE.parent / "heldout").glob("sections-*.json")):
        for q in json.loads(path.read_text(encoding="utf-8"))["questions"]:
            store_name = next(v for k, v in STORE_OF.items() if k in q["where"])
            if store_name not in workspaces:
                ws = Workspace(store=str(args.stores / store_name))
                workspaces[store_name] = (ws, ws.store_for_reading())
            ws, st = workspaces[store_name]
            number = named_number(q["names"])
            scope = ws.scope(st, q["question"])
            got = relevance_order(ws.retrieve(st, q["question"], 3, 1, scope=scope))
            hits = [r for r in got if r.score is not None]
            best = max(hits, key=lambda r: r.score) if hits else None
            shown = [describe(r.section) for r in got]
            row = {"qid": q["qid"], "named": number, "restricted_to": scope.described,
                   "best_cites": best is not None and cites(describe(best.section), number),
                   "any_cites": any(cites(c, number) for c in shown),
                   "gold_read": covers([r.event.text for r in got], q["gold_text"]) > 0,
                   "best_citation": describe(best.section) if best else None}
            rows.append(row)
            print(f"{row['qid']:<20} names {number:<6} scope={row['restricted_to']!s:<14} best cites it: "
                  f"{row['best_cites']!s:<5} any: {row['any_cites']!s:<5} gold read: {row['gold_read']!s:<5} "
                  f"best: {row['best_citation']}", flush=True)
    for ws, st in workspaces.values():
        st.close()
        ws.close()
    n = len(rows)
    print(f"\n{n} questions naming a place: restricted to it {sum(bool(r['restricted_to']) for r in rows)}, best hit "
          f"cites it {sum(r['best_cites'] for r in rows)}, some source cites it {sum(r['any_cites'] for r in rows)}, "
          f"gold excerpt read {sum(r['gold_read'] for r in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
