"""Does the answer model catch the sentences that the per-sentence evidence marks supported but the document does not
state? (issue 38 item 4: 73% of the sentences of answers graded wrong were shown with a supporting quote, because
the check counts shared words, and an act given to the wrong person shares its words with the source.)

For every answer sentence that `bench/answers/whole_heldout.py` recorded as supported by the word check, the answer model
reads the quotes shown for it and the sentence, and is asked whether the quotes state it
(engine/answer/claim_check.py: P(yes) over yes+no from the next token's logits, doubted below 0.5, fixed before
any run). Labels come from a reader who checked each sentence
against the document (`--labels`: {"<qid>#<n>": "stated" | "not stated"}). Prints, per label, how many sentences
the word check and the model pass.

    python bench/answers/claim_check.py --rows ROWS.json ... --labels LABELS.json [--out OUT.json]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from episodic_cli.engine.answer.claim_check import STATED_AT, ClaimChecker
from episodic_cli.engine.llama.backend import LlamaModel
from episodic_cli.engine.llama.models import prepare_model


def sentences(rows_files: list[Path]):
    """(key, sentence, quotes, found by the word check) for every sentence of every answer (and standalone answer)
    in the rows; rows recorded with the quote check on mark the sentences it doubted, which the words found."""
    for path in rows_files:
        for row in json.loads(path.read_text())["rows"]:
            for tag, result in (("", row), ("standalone", row.get("standalone_result") or {})):
                for n, check in enumerate(result.get("sentence_checks") or []):
                    key = f"{row['qid']}{'/' + tag if tag else ''}#{n}"
                    yield (key, check["sentence"], [q["quote"] for q in check["quotes"]],
                           check["supported"] or check.get("doubted", False))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=Path, nargs="+", required=True)
    ap.add_argument("--labels", type=Path, default=None)
    ap.add_argument("--model", default="qwen-1.5b")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    model = LlamaModel(prepare_model(args.model).path)
    checker = ClaimChecker(model)
    labels = json.loads(args.labels.read_text()) if args.labels else {}
    out, t0 = [], time.perf_counter()
    try:
        for key, sentence, quotes, supported in sentences(args.rows):
            p_yes = checker.p_stated(sentence, quotes) if supported and quotes else None
            out.append({"key": key, "sentence": sentence, "supported": supported, "p_yes": p_yes,
                        "label": labels.get(key)})
    finally:
        checker.close()
        model.close()
    seconds = time.perf_counter() - t0
    checked = [o for o in out if o["p_yes"] is not None]
    print(f"{len(out)} sentences, {len(checked)} marked supported by the word check; model read them in "
          f"{seconds:.0f} s ({seconds / max(1, len(checked)):.2f} s each)")
    for label in ("stated", "not stated"):
        mine = [o for o in out if o["label"] == label]
        if not mine:
            continue
        words = sum(o["supported"] for o in mine)
        both = sum(o["supported"] and o["p_yes"] is not None and o["p_yes"] >= STATED_AT for o in mine)
        print(f"  {label:<11} {len(mine):4d}: shown supported by the word check {words} ({words / len(mine):.0%}), "
              f"and also by the model {both} ({both / len(mine):.0%})")
    if args.out:
        args.out.write_text(json.dumps({"seconds": round(seconds, 1), "sentences": out}, indent=1,
                                       ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
