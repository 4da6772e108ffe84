"""The command line both renamed books share (rename_pride.py, ../whole2/rename_persuasion.py): check the input's
sha256, cut and rename, refuse an output with an original name left, write it and the renaming table."""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path


def run(description: str, input_sha256: str, make: Callable[[str], str], leftovers: Callable[[str], list[str]],
        mapping: dict, last_chapter: int) -> None:
    """`make(text)`: the renamed cut of the whole novel; `leftovers(renamed)`: original names still in it."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--mapping", type=Path, help="also write the renaming table as JSON")
    args = parser.parse_args()
    raw = args.source.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != input_sha256:
        sys.exit(f"{args.source}: sha256 {digest}, expected {input_sha256} (r-cran-janeaustenr 1.0.0-1)")
    renamed = make(raw.decode("utf-8"))
    left = leftovers(renamed)
    if left:
        sys.exit(f"original names left in the output: {left}")
    args.out.write_text(renamed, encoding="utf-8")
    if args.mapping:
        args.mapping.write_text(json.dumps(mapping, indent=2) + "\n", encoding="utf-8")
    print(f"{args.out}: chapters 1-{last_chapter}, {len(renamed.split())} words, "
          f"sha256 {hashlib.sha256(renamed.encode('utf-8')).hexdigest()}")
