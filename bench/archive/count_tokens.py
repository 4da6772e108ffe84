"""Count the archive's tokens with the answer model's tokenizer, over the text epi itself reads.

    python3 bench/archive/count_tokens.py [DEST] [--model GGUF] [--json OUT]

DEST defaults to /work/archive-1m (bench/archive/build.sh). Files are found and read by epi's own discovery and
readers (engine/documents/sources.py: pypdf page text for PDFs, the HTML reader's text, UTF-8 text and code as
epi decodes it), so a file epi would skip counts nothing. Tokens come from the bundled Qwen2.5-Coder-1.5B GGUF
(the model that reads and answers) loaded with vocab_only=True: no weights, a second or two. Prints one row per
part (the first two path levels: novels/austen, code/httpx-0.28.1, ...), each top folder's subtotal and the total,
as a Markdown table.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # epi's source beside this script, whether or not the installed copy matches it

from episodic_cli.engine.documents.sources import Skipped, discover, load_document  # noqa: E402
from episodic_cli.engine.llama.bundled import QWEN_1_5B, assembled_path  # noqa: E402

SLICE = 1 << 20  # characters tokenized at a time: a spooled long text is read in slices, as ingest reads it


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", nargs="?", default="/work/archive-1m")
    ap.add_argument("--model", help="GGUF whose tokenizer counts (default: the bundled Qwen 1.5B in epi's cache)")
    ap.add_argument("--json", help="also write {part: {files, tokens}} here")
    args = ap.parse_args()
    import llama_cpp

    model = Path(args.model) if args.model else assembled_path(QWEN_1_5B)
    if not model.exists():
        sys.exit(f"{model}: no such model; install epi's answer model (./install.sh) or pass --model")
    vocab = llama_cpp.Llama(str(model), vocab_only=True, verbose=False)
    dest = Path(args.dest).resolve()
    parts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for item in discover([dest]):
        if isinstance(item, Skipped):
            if not item.quiet:
                print(f"skipped {item.path}: {item.reason}", file=sys.stderr)
            continue
        path, _shown = item
        doc = load_document(path)
        try:
            # Slices cut on a character boundary, not a token one: the count may be off by a token a megabyte.
            n = sum(len(vocab.tokenize(doc.text[i:i + SLICE].encode("utf-8"), add_bos=False, special=False))
                    for i in range(0, len(doc.text), SLICE))
        finally:
            doc.close()
        part = "/".join(path.relative_to(dest).parts[:2])
        parts[part][0] += 1
        parts[part][1] += n
    print("| part | files | tokens |\n|---|---:|---:|")
    tops: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for part in sorted(parts):
        files, tokens = parts[part]
        top = part.split("/")[0]
        tops[top][0] += files
        tops[top][1] += tokens
        print(f"| {part} | {files} | {tokens:,} |")
    for top in sorted(tops):
        print(f"| **{top}/** | {tops[top][0]} | {tops[top][1]:,} |")
    total_files, total = sum(f for f, _ in parts.values()), sum(t for _, t in parts.values())
    print(f"| **total** | {total_files} | {total:,} |")
    if args.json:
        Path(args.json).write_text(json.dumps({p: {"files": f, "tokens": t} for p, (f, t) in sorted(parts.items())},
                                              indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
