#!/usr/bin/env bash
# Installs the Debian bookworm packages that Causeway's build, tests, tools
# and benchmark plots need. Idempotent: packages already installed are left
# alone, and apt-get (update + install) runs only when something is missing.
# Uses sudo when not run as root.
#
#   scripts/install-deps.sh            install what is missing
#   scripts/install-deps.sh --check    only report; exit 1 if anything is missing
#   scripts/install-deps.sh --bench    also what the PyTorch comparisons need
set -euo pipefail

PACKAGES=(
  build-essential       # g++ 12, make
  cmake                 # >= 3.25
  ninja-build
  ccache
  clang                 # the clang-tsa build (-Wthread-safety) and the asan build
  libclang-rt-14-dev    # clang's ASan, UBSan and libFuzzer runtimes (asan preset, fuzz/)
  libabsl-dev
  libeigen3-dev
  libopenblas-dev
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  libcli11-dev
  nlohmann-json3-dev
  libgoogle-perftools-dev   # tcmalloc_minimal, the allocator of non-sanitizer builds
  libprotobuf-dev
  protobuf-compiler
  libgrpc++-dev
  protobuf-compiler-grpc
  libgloo-dev           # collectives between worker processes (ring / halving-doubling)
  zlib1g-dev            # CRC-32 of checkpoint files (causeway/checkpoint)
  libvulkan-dev         # the vulkan device kind: loader and headers
  glslc                 # its compute shaders, GLSL -> SPIR-V at build time
  mesa-vulkan-drivers   # lavapipe: a Vulkan 1.3 device on the CPU, so the kind is tested everywhere
  libonnx-dev           # the ONNX importer: the library, checker, shape inference, version converter
  libonnx-testdata      # ONNX's backend test suite (onnx_conformance_test)
  python3-onnx          # tests/integration/run_onnx_test.sh reads ONNX's test tensors
  python3
  python3-dev           # the Python package's extension module (python/)
  pybind11-dev
  python3-numpy
  python3-pytest        # the Python package's tests
  python3-pip           # `pip install .` of the Python package (offline, no build isolation)
  python3-venv          # ... into a virtual environment (the Python tests do)
  python3-setuptools
  procps                # pgrep, in tests/integration/cluster_up_test.sh
  python3-matplotlib    # docs/ benchmark plots
)

# Only for the benchmarks that compare with PyTorch (python/bench/onnx_models.py,
# bench_onnx.py): large, and no test needs them.
BENCH_PACKAGES=(
  python3-torch
  python3-torchvision
)

check_only=0
for arg in "$@"; do
  case "$arg" in
    --check) check_only=1 ;;
    --bench) PACKAGES+=("${BENCH_PACKAGES[@]}") ;;
    *) echo "install-deps: unknown argument $arg (--check, --bench)" >&2; exit 2 ;;
  esac
done

missing=()
for pkg in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages are installed"
  exit 0
fi

echo "install-deps: missing: ${missing[*]}"
if ((check_only)); then
  exit 1
fi

sudo=()
if [[ "$(id -u)" -ne 0 ]]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install-deps: not root and sudo is not available; install as root:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  sudo=(sudo)
fi

apt_get=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y
         -o DPkg::Lock::Timeout=300)
"${apt_get[@]}" update
"${apt_get[@]}" install --no-install-recommends "${missing[@]}"
echo "install-deps: installed ${missing[*]}"
