#!/usr/bin/env bash
# Builds epi's patched llama-cpp-python with CUDA (-DGGML_CUDA=on): the version install.sh pins, with the patches
# install.sh applies (both read from install.sh, so the two cannot drift apart). No GPU is needed to compile.
#
#   native/build_cuda.sh [--toolkit auto|system|pip] [--sdist FILE] [--wheel-dir DIR] [--install | --target DIR]
#
# The CUDA toolkit:
#   system  nvcc from $CUDACXX, PATH, $CUDA_HOME or /usr/local/cuda. Where cuBLAS is not beside it (toolkits put
#           together from pip packages often lack it), cuBLAS is taken from the nvidia/cu13 or nvidia/cublas pip
#           package in $PYTHON's environment (PyTorch's CUDA build brings one).
#   pip     CUDA 13's pip packages, installed once into epi's cache (about 0.9 GB): nvidia-cuda-nvcc, -crt, nvvm,
#           -cccl, nvidia-cuda-runtime, nvidia-cublas. CUDA 12's packages cannot compile: nvidia-cuda-nvcc-cu12
#           (12.1, 12.6 and 12.9 looked at) ships ptxas, libnvvm and headers but no nvcc (docs/benchmarks.md,
#           "GPU offload and the CUDA build").
#   auto    (default) system where nvcc is found, else pip.
# Where the toolkit has no libcuda.so stub (pip's have none), one is made here from cuda.h for the link; the
# driver's libcuda.so.1 is what runs.
#
# Environment:
#   CUDA_ARCHITECTURES  CMAKE_CUDA_ARCHITECTURES: default the GPU's own (nvidia-smi), else llama.cpp's portable list
#                       (75-virtual;80-virtual;86-real;89-real;90-virtual;... a long compile). One architecture
#                       compiles fastest: CUDA_ARCHITECTURES=90 for an H100/H200, 89 for an RTX 40xx, 86, 80 ...
#   JOBS                parallel compile jobs (default: all cores)
#   PYTHON              the Python that builds (and --install installs into); default python3
#   BUILD_DIR           a lasting CMake build folder: a second run recompiles only what changed
#   VERBOSE=1           show CMake's and the compiler's output (pip shows it anyway when the build fails)
#   EPI_CUDA_PIP_DIR    where --toolkit pip installs the toolkit (default: epi's cache/cuda-13.0)
# The wheel goes where install.sh looks for it (epi's cache, keyed by the patches and CMAKE_ARGS), so that
# `CMAKE_ARGS="<the args printed at the end>" ./install.sh` installs it instead of compiling again.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
toolkit=auto
sdist=""
wheel_dir=""
install=""
target=""
while [ $# -gt 0 ]; do
    case "$1" in
        --toolkit) toolkit="${2:-}"; shift 2 ;;
        --toolkit=*) toolkit="${1#*=}"; shift ;;
        --sdist) sdist="${2:-}"; shift 2 ;;
        --wheel-dir) wheel_dir="${2:-}"; shift 2 ;;
        --install) install=1; shift ;;
        --target) target="${2:-}"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//; /^set -euo/d'; exit 0 ;;
        *) echo "build_cuda.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$toolkit" in auto|system|pip) ;; *) echo "build_cuda.sh: --toolkit takes auto, system or pip" >&2; exit 2 ;; esac
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 4)}"
say() { echo "build_cuda.sh: $*" >&2; }
die() { say "$*"; exit 1; }
t_start=$(date +%s)

# 1. What install.sh builds: the pinned version and the patches, in its order.
version=$(grep -o '"llama-cpp-python==[0-9][0-9.]*[0-9]"' "$repo/install.sh" | head -n1 | tr -d '"' | cut -d= -f3)
[ -n "$version" ] || die "cannot read the llama-cpp-python pin from install.sh"
patches=()
while read -r p; do patches+=("$repo/$p"); done < <(grep -m1 '^llama_patches=(' "$repo/install.sh" |
    grep -o 'native/llama_cpp/[A-Za-z0-9_.-]*\.patch')
[ ${#patches[@]} -gt 0 ] || die "cannot read the llama.cpp patches from install.sh"
for p in "${patches[@]}"; do [ -f "$p" ] || die "patch $p (named in install.sh) is missing"; done

if [ -n "${EPI_HOME:-}" ]; then
    epi_cache="$EPI_HOME/cache"
elif [ "$(uname -s)" = "Darwin" ]; then
    epi_cache="$HOME/Library/Caches/epi"
else
    epi_cache="${XDG_CACHE_HOME:-$HOME/.cache}/epi"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 2. The toolkit: nvcc, its root, cuBLAS and a libcuda to link against.
find_nvcc() {
    local c
    for c in "${CUDACXX:-}" "$(command -v nvcc 2>/dev/null || true)" "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" \
             "${CUDA_PATH:+$CUDA_PATH/bin/nvcc}" /usr/local/cuda/bin/nvcc; do
        if [ -n "$c" ] && [ -x "$c" ]; then echo "$c"; return 0; fi
    done
    return 1
}
nvcc_top() {  # the toolkit root nvcc uses (it may be a wrapper script or a symlink elsewhere)
    local top
    top=$("$1" -dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -n1)
    [ -n "$top" ] && (cd "$top" && pwd -P)
}
pip_toolkit() {  # CUDA 13 from pip, laid out as a toolkit nvcc and CMake understand
    local dir="${EPI_CUDA_PIP_DIR:-$epi_cache/cuda-13.0}"
    local root="$dir/nvidia/cu13"
    if [ ! -x "$root/bin/nvcc" ] || [ ! -e "$root/lib/libcublas.so.13" ]; then
        say "installing CUDA 13.0's compiler, runtime and cuBLAS from pip into $dir (about 0.9 GB, once)"
        "$PYTHON" -m pip install --disable-pip-version-check --quiet --no-deps --upgrade --target "$dir" \
            nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-cccl==13.0.85 \
            nvidia-cuda-runtime==13.0.96 nvidia-cublas==13.0.2.14 >&2
    fi
    [ -x "$root/bin/nvcc" ] || die "pip installed no nvcc at $root/bin/nvcc"
    # nvcc.profile looks for $TOP/targets/x86_64-linux/{include,lib}; the wheels put them at $TOP/{include,lib}
    mkdir -p "$root/targets/x86_64-linux"
    ln -sfn ../../include "$root/targets/x86_64-linux/include"
    ln -sfn ../../lib "$root/targets/x86_64-linux/lib"
    local so
    for so in cudart cublas cublasLt nvvm; do  # the linker and CMake want the unversioned names
        [ -e "$root/lib/lib$so.so" ] || ln -sfn "$(cd "$root/lib" && ls "lib$so.so."* | head -n1)" "$root/lib/lib$so.so"
    done
    [ -e "$root/nvvm/lib64" ] || { mkdir -p "$root/nvvm"; ln -sfn ../lib "$root/nvvm/lib64"; }
    echo "$root"
}
has_cublas() { ls "$1"/include/cublas_v2.h "$1"/targets/*/include/cublas_v2.h >/dev/null 2>&1; }
pip_cublas() {  # a cuBLAS pip package in $PYTHON's environment: prints its folder (include/ and lib/ inside)
    "$PYTHON" - "$1" <<'EOF'
import glob, os, site, sys, sysconfig
major = sys.argv[1]
roots = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()]
for root in dict.fromkeys(roots):
    for sub in (f"nvidia/cu{major}", "nvidia/cublas"):
        d = os.path.join(root, sub)
        lib = glob.glob(os.path.join(d, "lib", f"libcublas.so.{major}*"))
        if os.path.isfile(os.path.join(d, "include", "cublas_v2.h")) and lib:
            print(d)
            sys.exit(0)
sys.exit(1)
EOF
}

nvcc=""
if [ "$toolkit" != pip ]; then
    nvcc=$(find_nvcc || true)
    if [ -z "$nvcc" ]; then
        [ "$toolkit" = system ] &&
            die "no nvcc found (PATH, \$CUDACXX, \$CUDA_HOME, /usr/local/cuda); try --toolkit pip"
        toolkit=pip
    else
        toolkit=system
    fi
fi
if [ "$toolkit" = pip ]; then
    root=$(pip_toolkit)
    nvcc="$root/bin/nvcc"
else
    root=$(nvcc_top "$nvcc") || die "cannot tell where $nvcc's toolkit is (nvcc -dryrun printed no TOP)"
fi
cuda_version=$("$nvcc" --version | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p')
cuda_major=${cuda_version%%.*}
[ -n "$cuda_major" ] || die "$nvcc --version printed no release number"
say "CUDA $cuda_version: nvcc $nvcc, toolkit $root ($toolkit)"

# Whatever the toolkit lacks goes into one extra folder that CMake and the compilers search.
extra="${BUILD_DIR:-$epi_cache/cuda-build}/toolkit-extra"
rm -rf "$extra"
mkdir -p "$extra/include" "$extra/lib/stubs"
runtime_dirs="$root/lib"
if ! has_cublas "$root"; then
    cublas=$(pip_cublas "$cuda_major") || die "cuBLAS is not in $root and no nvidia-cublas (CUDA $cuda_major) pip" \
        "package is in $PYTHON's environment; install it (pip install nvidia-cublas) or use --toolkit pip"
    say "cuBLAS from the pip package at $cublas"
    for h in "$cublas"/include/cublas*.h "$cublas"/include/nvblas.h; do
        [ -e "$h" ] && ln -sfn "$h" "$extra/include/"
    done
    for so in cublas cublasLt; do  # the unversioned name for the link, the versioned one for the RPATH
        lib=$(ls "$cublas"/lib/lib$so.so.$cuda_major* | head -n1)
        ln -sfn "$lib" "$extra/lib/lib$so.so"
        ln -sfn "$lib" "$extra/lib/$(basename "$lib")"
    done
    runtime_dirs="$runtime_dirs:$cublas/lib"
fi
if ! ls "$root"/lib*/stubs/libcuda.so "$root"/targets/*/lib/stubs/libcuda.so >/dev/null 2>&1; then
    # The driver API stub toolkits ship in lib64/stubs: every function cuda.h declares (after its _v2 renames),
    # soname libcuda.so.1. An empty stub would link too, but the linker (--as-needed) would then record no
    # libcuda.so.1 and leave cuMemCreate & co. unresolved, failing at the first CUDA call.
    printf '#include <cuda.h>\n' | ${CC:-cc} -E -P -I"$root/include" -I"$root/targets/x86_64-linux/include" -x c - |
        grep -o '\bcu[A-Z][A-Za-z0-9_]*[[:space:]]*(' | tr -d '( \t' | sort -u |
        sed 's/.*/void &(void) {}/' > "$work/stub.c"
    [ -s "$work/stub.c" ] || die "found no driver API functions in $root's cuda.h to make a libcuda.so stub from"
    ${CC:-cc} -shared -fPIC -o "$extra/lib/stubs/libcuda.so" -Wl,-soname,libcuda.so.1 "$work/stub.c"
fi
export CPATH="$extra/include${CPATH:+:$CPATH}"
export CMAKE_LIBRARY_PATH="$extra/lib:$extra/lib/stubs${CMAKE_LIBRARY_PATH:+:$CMAKE_LIBRARY_PATH}"
export CUDACXX="$nvcc"
export CUDAToolkit_ROOT="$root"

# 3. Build flags: install.sh's portable CPU flags (no -march=native), CUDA on, the architectures.
if [ -z "${CUDA_ARCHITECTURES:-}" ] && command -v nvidia-smi >/dev/null 2>&1; then
    CUDA_ARCHITECTURES=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 |
        tr -d ' .' || true)
    [[ "$CUDA_ARCHITECTURES" =~ ^[0-9]+$ ]] || CUDA_ARCHITECTURES=""
fi
args="-DGGML_NATIVE=OFF"
if [ "$(uname -s)" = "Linux" ] && [ "$(uname -m)" = "x86_64" ]; then
    flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
    has() { [[ " $flags " == *" $1 "* ]]; }
    has avx2 && args="$args -DGGML_AVX2=ON"
    has fma && args="$args -DGGML_FMA=ON"
    has f16c && args="$args -DGGML_F16C=ON"
    has bmi2 && args="$args -DGGML_BMI2=ON"
    has avx512f && args="$args -DGGML_AVX512=ON"
    has avx512_vnni && args="$args -DGGML_AVX512_VNNI=ON"
    has avx512_bf16 && args="$args -DGGML_AVX512_BF16=ON"
    has avx_vnni && args="$args -DGGML_AVX_VNNI=ON"
fi
args="$args -DGGML_CUDA=on${CUDA_ARCHITECTURES:+ -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHITECTURES}"
# where the toolkit is: passed to this build only, not part of the flags install.sh keys its cache by
toolkit_args="-DCMAKE_CUDA_COMPILER=$nvcc -DCUDAToolkit_ROOT=$root -DCMAKE_CUDA_FLAGS=-I$extra/include"
# pip's libcudart/libcublas are on no loader path: the libraries look for them where they are (epi's cache)
[ "$toolkit" = pip ] && toolkit_args="$toolkit_args -DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath,$root/lib"
say "CMAKE_ARGS: $args"
say "architectures: ${CUDA_ARCHITECTURES:-the portable list of llama.cpp}; $JOBS jobs"

# 4. The source, patched as install.sh patches it.
if [ -z "$sdist" ]; then
    "$PYTHON" -m pip download --disable-pip-version-check --quiet --no-deps --no-binary :all: -d "$work" \
        "llama-cpp-python==$version"
    sdist="$work/llama_cpp_python-$version.tar.gz"
fi
[ -f "$sdist" ] || die "no source archive at $sdist"
tar -xf "$sdist" -C "$work"
src="$work/llama_cpp_python-$version"
[ -d "$src" ] || die "$sdist does not hold llama_cpp_python-$version/"
for llama_patch in "${patches[@]}"; do
    if command -v patch >/dev/null 2>&1; then
        check=(patch -d "$src" -p1 --fuzz=0 --forward --batch --dry-run -i "$llama_patch")
        apply=(patch -d "$src" -p1 --fuzz=0 --forward --batch --silent -i "$llama_patch")
    else
        check=(git -C "$src" apply --check "$llama_patch")
        apply=(git -C "$src" apply "$llama_patch")
    fi
    if ! "${check[@]}" >"$work/patch.log" 2>&1 || ! "${apply[@]}" >>"$work/patch.log" 2>&1; then
        die "epi's llama.cpp patch ($llama_patch) does not apply to llama-cpp-python $version:" \
            "$(head -n3 "$work/patch.log")"
    fi
done

# 5. The wheel. With no network (or to skip the isolated build environment), an installed scikit-build-core builds.
build_key=$("$PYTHON" -c 'import hashlib, os, platform, sys
h = hashlib.sha256()
for patch in sys.argv[2:]:
    h.update(open(patch, "rb").read())
h.update(repr((sys.argv[1], sys.implementation.cache_tag, platform.system(), platform.machine())).encode())
print(h.hexdigest()[:16])' "$args" "${patches[@]}")
wheel_dir="${wheel_dir:-$epi_cache/llama-cpp-python/$build_key}"
isolation=()
if [ "${EPI_BUILD_ISOLATION:-auto}" = 0 ] || { [ "${EPI_BUILD_ISOLATION:-auto}" = auto ] &&
        "$PYTHON" -c 'import scikit_build_core' 2>/dev/null; }; then
    isolation=(--no-build-isolation)
fi
config=()
[ -n "${BUILD_DIR:-}" ] && mkdir -p "$BUILD_DIR/cmake" && config=(-C "build-dir=$BUILD_DIR/cmake")
export CMAKE_ARGS="$args $toolkit_args"
export CMAKE_BUILD_PARALLEL_LEVEL="$JOBS"
t_build=$(date +%s)
"$PYTHON" -m pip wheel --disable-pip-version-check --no-deps ${VERBOSE:+-v} ${isolation[@]+"${isolation[@]}"} \
    ${config[@]+"${config[@]}"} --wheel-dir "$work/wheel" "$src"
build_s=$(( $(date +%s) - t_build ))
mkdir -p "$wheel_dir"
for built in "$work"/wheel/llama_cpp_python-*.whl; do
    cp "$built" "$wheel_dir/.$(basename "$built").part"
    mv "$wheel_dir/.$(basename "$built").part" "$wheel_dir/$(basename "$built")"
    wheel="$wheel_dir/$(basename "$built")"
done
say "built $wheel in ${build_s}s (all steps: $(( $(date +%s) - t_start ))s)"
if [ -n "$install" ]; then
    "$PYTHON" -m pip install --disable-pip-version-check --force-reinstall --no-deps "$wheel"
fi
if [ -n "$target" ]; then
    "$PYTHON" -m pip install --disable-pip-version-check --quiet --no-deps --upgrade --target "$target" "$wheel"
fi
say "at run time the CUDA libraries are found in $runtime_dirs (add them to LD_LIBRARY_PATH if llama_cpp does not load)"
say "install.sh reuses this wheel with: CMAKE_ARGS=\"$args\" ./install.sh"
