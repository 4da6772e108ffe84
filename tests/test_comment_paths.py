"""Every file a comment or docstring names exists: after a layout change renamed modules (document_text.py ->
documents/text.py, upgrade_v1.py -> upgrade/v1.py, event_keys -> kv/keys, kv_memory -> kv/blocks), comments went on
naming the old files (issue 35).

A name counts as a file path when it ends in .py, .md or .sh (`bench/answers/heldout.py`, `docs/usage.md`, `install.sh`,
`text.py`) or starts with one of the repository's top-level folders (`engine/kv/keys`, `store/kv_tier/`). It resolves
against the repository root, `episodic_cli/`, the installed layout (`episodic_cli/store` is `store/`), and the
commenting file's own folder and the folders above it; a bare file name (`test_kv_memory.py`) may be any file of
that name in the repository. Names of other projects' files are listed in FOREIGN."""
from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {"__pycache__", "build", "dist", "venv", "env", "node_modules"}  # and hidden ones (.git, .venv)
TOP_DIRS = ("episodic_cli", "engine", "store", "native", "bench", "tests", "docs")
# Files of other projects that comments name on purpose (ggml's GGUF spec), and made-up names in examples.
FOREIGN = {"gguf.md", "docs/gguf.md"}
EXAMPLES = {"a.py", "b.md", "notes.md", "util.py", "utils.py", "cache.py", "cache/__init__.py", "src/a.py",
            "src/util.py", "project/src/a.py"}
# `name.py`, `dir/name.md`, `./install.sh`: not part of a longer word, a URL or a glob.
_FILE_RE = re.compile(r"(?<![\w./*~$-])((?:\.{1,2}/)?(?:[\w.-]+/)*[\w-]+\.(?:py|md|sh))(?![\w/-])")
# `engine/kv/keys`, `store/kv_tier/`, `bench/heldout/sections-*.json`: a path into one of the repository's folders.
_DIR_RE = re.compile(r"(?<![\w./*~$-])((?:" + "|".join(TOP_DIRS) + r")/[\w./*-]*[\w/*])")


def repository_files() -> list[Path]:
    out = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".") and not d.endswith(".egg-info")]
        out += [Path(folder, f) for f in files]
    return out


def python_files() -> list[Path]:
    return sorted(p for p in repository_files() if p.suffix == ".py")


def comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each comment and docstring of a Python file."""
    source = path.read_text(encoding="utf-8")
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                out.append((body[0].lineno, body[0].value.value))
    return out


def named_paths(text: str) -> list[str]:
    return list(dict.fromkeys(m.group(1) for r in (_FILE_RE, _DIR_RE) for m in r.finditer(text)))


_BASENAMES: set[str] = set()


def _exists(name: str, source: Path) -> bool:
    if not _BASENAMES:
        _BASENAMES.update(p.name for p in repository_files())
    if name in FOREIGN or name in EXAMPLES:
        return True
    if "/" not in name.rstrip("/"):
        return name in _BASENAMES
    name = name.rstrip("/")
    head, _, last = name.rpartition("/")
    module = f"{head}/{last.split('.')[0]}.py"  # `engine/kv/keys.k_shift`: a module and one of its names
    bases = [ROOT, ROOT / "episodic_cli", *source.parents]
    for base in bases:
        if base != ROOT and ROOT not in base.parents:
            continue
        for candidate in (base / name, base / f"{name}.py", base / module):
            if candidate.exists() or "*" in name and (any(base.glob(name)) or _glob_folder(base, name).is_dir()):
                return True
            parts = candidate.relative_to(ROOT).parts if ROOT in candidate.parents else ()
            if parts[:2] in (("episodic_cli", "store"), ("episodic_cli", "native")):  # installed under episodic_cli
                if ROOT.joinpath(*parts[1:]).exists():
                    return True
    return False


def _glob_folder(base: Path, pattern: str) -> Path:
    """The folder a glob's files would be in (`native/_kernels*.so` is built there by the install)."""
    return base.joinpath(*pattern.split("*")[0].split("/")[:-1])


def test_the_path_patterns_find_what_they_should():
    text = ("see engine/documents/text.py, `docs/usage.md`, ./install.sh and text.py; engine/kv/keys (k_shift); "
            "not https://example.org/a/b.py, *.py, foo.pyc, x.py_thing or store.lexical")
    assert named_paths(text) == ["engine/documents/text.py", "docs/usage.md", "./install.sh", "text.py",
                                 "engine/kv/keys"]


def test_a_stale_name_is_caught():
    here = ROOT / "episodic_cli" / "engine" / "documents" / "sources.py"
    assert _exists("text.py", here) and _exists("documents/text.py", here) and _exists("engine/kv/keys", here)
    assert _exists("store/kv_tier/space.py", here) and _exists("episodic_cli/store/records.py", here)
    assert _exists("engine/kv/keys.k_shift", here) and not _exists("engine/event_keys.k_shift", here)
    assert not _exists("document_text.py", here) and not _exists("engine/event_keys", here)
    assert not _exists("engine/kv_memory.py", here) and not _exists("docs/assemble.json", here)
    assert _exists("bench/heldout/sections-*.json", here) and _exists("native/_kernels*.so", here)


# Modules renamed by the layout change, named the old way as modules (`kv_memory.session_v_trans`).
RENAMED = {"kv_memory": "kv/blocks", "kv_capture": "kv/keeper", "event_keys": "kv/keys", "document_text":
           "documents/text", "llama_backend": "llama/backend", "upgrade_v1.py": "store/upgrade/v1.py"}
_RENAMED_RE = re.compile(r"\b(kv_memory|kv_capture|event_keys|document_text|llama_backend)\.\w+|\bupgrade_v1\.py")


def test_no_comment_names_a_renamed_module():
    files = python_files()
    files.remove(Path(__file__).resolve())
    stale = [f"{path.relative_to(ROOT)}:{line}: {m.group(0)} (now {RENAMED[m.group(1) or 'upgrade_v1.py']})"
             for path in files for line, text in comments_and_docstrings(path) for m in _RENAMED_RE.finditer(text)]
    assert not stale, "comments name modules by their old names:\n" + "\n".join(stale)


def test_every_file_a_comment_names_exists():
    files = python_files()
    assert len(files) > 100 and ROOT / "episodic_cli" / "app.py" in files
    files.remove(Path(__file__).resolve())  # this module's docstring names the old files on purpose
    missing = [f"{path.relative_to(ROOT)}:{line}: {name}" for path in files
               for line, text in comments_and_docstrings(path) for name in named_paths(text)
               if not _exists(name, path)]
    assert not missing, ("comments name files that do not exist (name the file as it is now; a made-up name in an "
                         "example goes in EXAMPLES above):\n" + "\n".join(missing))
