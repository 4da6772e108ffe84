#!/usr/bin/env bash
# Installs epi and everything it needs into the active Python environment (a virtualenv if one is active).
# After it, `epi ingest FILE` and `epi ask "QUESTION"` work offline with the bundled model.
#
# What it takes care of:
# - torch: the CPU build (a plain `pip install torch` on Linux pulls a multi-GB CUDA build).
# - llama-cpp-python: built from source with the CPU features this machine really has, instead of -march=native,
#   which crashes with "Illegal instruction" on some virtual machines. Set CMAKE_ARGS yourself for a GPU build:
#     CMAKE_ARGS="-DGGML_CUDA=on" ./install.sh        (NVIDIA; needs the CUDA toolkit)
#     ./install.sh                                     (macOS: Metal is on by default)
# - hnswlib: built without -march=native for the same reason.
set -euo pipefail
cd "$(dirname "$0")"
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
fi

# 1. CPU torch for the embedder, unless some torch is already there (a CUDA or MPS one is fine too).
if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
    if [ "$(uname -s)" = "Linux" ]; then
        # A CPU wheel already on this machine (find-links / mirror) first, its pure-Python dependencies from the
        # usual index; otherwise PyTorch's CPU-only index, which also serves those dependencies.
        if pip_install --no-index --no-deps "torch==2.13.0" 2>/dev/null; then
            pip_install "torch==2.13.0"
        else
            pip_install "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu
        fi
    else
        pip_install "torch==2.13.0"
    fi
fi

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
elif [ -n "${CMAKE_ARGS:-}" ]; then
    # A custom (GPU) build must not be satisfied by pip's cached CPU wheel.
    pip_install --force-reinstall --no-cache-dir --no-deps "llama-cpp-python==0.3.36"
fi
export HNSWLIB_NO_NATIVE=1
echo "building llama.cpp with: ${CMAKE_ARGS:-defaults} (the first build takes several minutes)" >&2

# 3. epi itself (editable: the native kernels are compiled in place), with the bundled models and test tools.
pip_install -e ".[test]"

# pyenv only creates the `epi` shim on a rehash.
if command -v pyenv >/dev/null 2>&1; then pyenv rehash || true; fi
"$PYTHON" -m episodic_cli --version
if [ -n "$created_venv" ]; then
    mkdir -p "$HOME/.local/bin" && ln -sf "$PWD/.venv/bin/epi" "$HOME/.local/bin/epi"
    echo "linked ~/.local/bin/epi (make sure ~/.local/bin is on PATH); run the tests with: .venv/bin/python -m pytest" >&2
fi
echo "installed. Try: epi ingest README.md && epi ask \"what does epi do?\"" >&2
