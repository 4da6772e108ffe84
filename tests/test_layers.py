"""The engine's layers run one way: each package imports only the packages below it, and ingest and answering never
import each other (docs/how-it-works.md, "Layout"). Read from the source with ast, so a new import that runs back up
fails here, not in a review."""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "episodic_cli" / "engine"

# What each part of the engine may import (besides itself). Parts not named here are modules at the engine's top.
BASE = {"errors", "paths", "heap", "package_files"}
ALLOWED = {
    "documents": BASE,
    "llama": BASE,
    "embed": BASE,
    "kv": BASE | {"llama"},
    "retrieval": BASE | {"documents"},
    "prompt": BASE | {"llama", "retrieval", "documents"},
    "budgets": set(),
    "ingest": BASE | {"documents", "llama", "embed", "kv", "prompt"},
    "answer": BASE | {"documents", "llama", "kv", "retrieval", "prompt", "budgets"},
    "errors": set(),
    "paths": {"errors"},
    "package_files": {"errors", "paths"},  # where an installed model package's files are, checked by hash
    "heap": set(),
    "ask_options": BASE | {"budgets", "retrieval"},  # a question's choices, checked without a model or a store
    "ask_plan": BASE | {"ask_options", "retrieval"},  # the planner: pure, no model, no store, no retrieval run
}


def installed_names() -> dict[str, list[str]]:
    """Source folders that install under another name (pyproject.toml's package-dir: store/ is episodic_cli.store),
    so that a relative import in them resolves as it does once installed."""
    found = re.findall(r'^"([\w.]+)" = "(\w+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    return {folder: package.split(".") for package, folder in found}


INSTALLED_AS = installed_names()


def module_name(path: Path) -> list[str]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] in INSTALLED_AS:
        parts = INSTALLED_AS[parts[0]] + parts[1:]
    return parts[:-1] if parts[-1] == "__init__" else parts


def imported_modules(path: Path, ours_only: bool = True, as_module: list[str] | None = None) -> set[str]:
    """Absolute dotted names of everything `path` imports (from the episodic_cli package alone, unless not
    `ours_only`); `as_module`: the module's installed name, where `path` is not in the tree."""
    here = as_module or module_name(path)
    package = here if path.name == "__init__.py" else here[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = base + (node.module.split(".") if node.module else [])
            else:
                target = (node.module or "").split(".")
            for alias in node.names:
                found.add(".".join(target + [alias.name]))
                found.add(".".join(target))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("episodic_cli") or not ours_only}


def engine_part(name: str) -> str | None:
    """`episodic_cli.engine.kv.blocks` -> "kv"; None outside the engine."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["episodic_cli", "engine"] else None


def engine_files() -> list[Path]:
    return sorted(ENGINE.rglob("*.py"))


@pytest.mark.parametrize("path", engine_files(), ids=lambda p: str(p.relative_to(ENGINE)))
def test_engine_imports_run_one_way(path):
    part = module_name(path)[2] if len(module_name(path)) > 2 else None
    if part is None or part not in ALLOWED:
        return  # the front door (workspace, diagnostics) may import any of the engine
    wrong = set()
    for name in imported_modules(path):
        if name.startswith(("episodic_cli.app", "episodic_cli.render", "episodic_cli.repl", "episodic_cli.run_progress")):
            wrong.add(name)
        target = engine_part(name)
        if target is not None and target != part and target not in ALLOWED[part]:
            wrong.add(name)
    assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)} (engine part {part!r} may import {sorted(ALLOWED[part])})"


def test_store_and_native_import_nothing_of_the_engine():
    assert INSTALLED_AS == {"store": ["episodic_cli", "store"], "native": ["episodic_cli", "native"]}
    for path in sorted((ROOT / "store").rglob("*.py")):
        wrong = {n for n in imported_modules(path, ours_only=False)
                 if n.startswith(("episodic_cli.engine", "episodic_cli.app", "llama_cpp"))}
        assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}"
    for path in sorted((ROOT / "native").rglob("*.py")):
        wrong = {n for n in imported_modules(path) if not n.startswith("episodic_cli.native")}
        assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}"


def test_a_store_module_importing_the_engine_relatively_is_seen(tmp_path):
    """The check itself: store/ installs as episodic_cli.store, so `..engine` from it is the engine."""
    fake = tmp_path / "fake.py"
    fake.write_text("from ..engine.llama import backend\nfrom . import records\n")
    found = imported_modules(fake, as_module=INSTALLED_AS["store"] + ["fake"])
    assert "episodic_cli.engine.llama.backend" in found and "episodic_cli.store.records" in found


def test_the_ast_walk_sees_a_relative_import_that_runs_back_up(tmp_path):
    """The check itself: an answer-side import written inside ingest/ is caught."""
    fake = ENGINE / "ingest" / "pipeline.py"
    found = imported_modules(fake)
    assert "episodic_cli.engine.prompt" in found  # relative `..prompt` resolved from the package
    assert engine_part("episodic_cli.engine.answer.kv_mode") == "answer" not in ALLOWED["ingest"]


@pytest.mark.parametrize("package,forbidden", [("ingest", "answer"), ("answer", "ingest")])
def test_ingest_and_answering_load_without_each_other(package, forbidden):
    """Imported for real, not only read: importing one side loads no module of the other."""
    modules = [".".join(module_name(p)) for p in sorted((ENGINE / package).glob("*.py"))]
    code = (f"import importlib, sys; [importlib.import_module(m) for m in {modules!r}]; "
            f"print([m for m in sys.modules if m.startswith('episodic_cli.engine.{forbidden}')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout
