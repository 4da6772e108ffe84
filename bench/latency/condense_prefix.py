"""A chat follow-up's rewrite with the prompt's instructions and worked examples kept in the cache between rewrites,
against decoding the whole prompt each time (the code before): side by side, alternating, in one run.

No document is read: the follow-ups and their one-turn conversations below are invented.

    python bench/latency/condense_prefix.py [--repeat 3] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from episodic_cli.engine.answer.condense import Condenser
from episodic_cli.engine.llama.backend import LlamaModel
from episodic_cli.engine.llama.models import prepare_model

TURNS = [
    ("Which command lists the files in an archive?", "tar -tf lists them.", "And with compression?"),
    ("Who keeps the lighthouse in chapter 4?", "Ada Brenn keeps it.", "Why does she leave it in winter?"),
    ("What does the --retry option do?", "It retries a failed download.", "How many times does it try?"),
    ("Which module parses the config file?", "config.py parses it.", "What does it do with unknown keys?"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen-1.5b")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "condense_prefix.json")
    args = ap.parse_args()
    model = LlamaModel(prepare_model(args.model).path)
    condenser = Condenser(model)
    times: dict[str, list[float]] = {"kept": [], "whole prompt": []}
    texts: dict[str, list[str]] = {"kept": [], "whole prompt": []}
    condenser.rewrite([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}], "z?")  # warm up
    for _ in range(args.repeat):
        for question, answer, follow_up in TURNS:
            history = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
            for way in times:
                if way == "whole prompt":
                    condenser._prompt = np.zeros(0, dtype=np.int32)  # nothing shared: the whole prompt is decoded
                start = time.perf_counter()
                text = condenser.rewrite(history, follow_up)
                times[way].append(time.perf_counter() - start)
                texts[way].append(text)
            # "kept" follows another rewrite, as in a chat: only the instructions and examples are shared
    condenser.close()
    model.close()
    result = {way: {"median_s": round(statistics.median(t), 3), "n": len(t)} for way, t in times.items()}
    result["ratio"] = round(result["whole prompt"]["median_s"] / result["kept"]["median_s"], 2)
    result["same_rewrites"] = texts["kept"] == texts["whole prompt"]
    print(json.dumps(result, indent=1))
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
