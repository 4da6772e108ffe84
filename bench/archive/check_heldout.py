"""Check that the archive holds each held-out set's documents byte for byte, as heldout_paths.json maps them.

    python3 bench/archive/check_heldout.py [DEST]

For every set in heldout_paths.json: the set file's `documents` and the mapped paths pair up one to one, every
sha256 in the set's `written_on` matches the archive's file (a path under a mapped folder maps onto the same
tail under the archive's folder), and for the code sets pinned by package version alone every question's
gold excerpt occurs in the archive's .py files. Exits 1 on the first difference. Standard library only.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    dest = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/archive-1m")
    mapping = json.loads((HERE / "heldout_paths.json").read_text(encoding="utf-8"))["sets"]
    for name, entry in mapping.items():
        spec = json.loads((ROOT / entry["file"]).read_text(encoding="utf-8"))
        mine = entry["documents"]
        if spec["set"] != name or len(spec["documents"]) != len(mine):
            sys.exit(f"{name}: {entry['file']} names {spec['documents']}, the mapping {mine}")
        for p in mine:
            if not (dest / p).exists():
                sys.exit(f"{name}: {dest / p} is missing (run bench/archive/build.sh)")
        written = spec.get("written_on", {}).get("sha256", {})
        for orig, want in written.items():
            rel = next((m + orig[len(d):] for d, m in zip(spec["documents"], mine)
                        if orig == d or orig.startswith(d + "/")), None)
            if rel is None or sha256(dest / rel) != want:
                sys.exit(f"{name}: {orig} has no byte-identical copy in the archive ({rel})")
        note = f"{len(written)} sha256"
        if not written:  # pinned by package version only: the questions' excerpts must be in the archive's code
            text = squash(" ".join(f.read_text(encoding="utf-8") for p in mine for f in sorted((dest / p).rglob("*.py"))))
            missing = [q["qid"] for q in spec["questions"] if squash(q["gold_text"]) not in text]
            if missing:
                sys.exit(f"{name}: gold excerpts of {missing} are not in the archive's copy")
            note = f"{len(spec['questions'])} gold excerpts"
        print(f"{name}: ok ({note})")


if __name__ == "__main__":
    main()
