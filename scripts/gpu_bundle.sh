#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh needs into one archive for a GPU machine
# that has none of Debian's packages: the stripped `causeway`,
# `conformance_test`, `vulkan_ops_test`, `device_test`,
# `control_flow_bench` and `cuda_ops_test` (where built), every shared
# library they load but NVIDIA's (cuBLASLt comes from the GPU machine)
# (the Vulkan loader libvulkan.so.1, gRPC, protobuf, abseil, OpenBLAS, the
# C++ runtime, and glibc with its dynamic loader in lib/glibc, so that the
# binaries run whatever the machine's own libraries are), the check script
# and a text to train on. The GPU's Vulkan driver is not in it: it comes with the GPU's
# driver on that machine (docs/VULKAN.md).
#
#   scripts/gpu_bundle.sh [--build DIR] [--data FILE] [-o OUT.tar.xz]
#
# On the GPU machine:
#   tar xf causeway-gpu.tar.xz && causeway-gpu/scripts/gpu_check.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=build/release
data=README.md
out=build/causeway-gpu.tar.xz
while (($#)); do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_bundle.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/causeway-gpu
mkdir -p "$root/bin" "$root/lib" "$root/scripts" "$root/data"
binaries=(causeway conformance_test vulkan_ops_test device_test control_flow_bench)
[[ -x $build/bin/cuda_ops_test ]] && binaries+=(cuda_ops_test)
for b in "${binaries[@]}"; do
  if [[ ! -x $build/bin/$b ]]; then
    echo "gpu_bundle.sh: $build/bin/$b is missing (build the release preset first)" >&2
    exit 1
  fi
  strip -o "$root/bin/$b" "$build/bin/$b"
done
# Every library the binaries load, and the dynamic loader itself.
for b in "${binaries[@]}"; do
  ldd "$build/bin/$b"
done | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/.*ld-linux/ { print $1 }' |
  sort -u | while read -r lib; do
    name=$(basename "$lib")
    # glibc apart: gpu_check.sh runs the binaries under it only where the
    # machine's own glibc is older than the one they were built against.
    case $name in
      # NVIDIA's libraries (hundreds of MB) come from the GPU machine: its
      # CUDA toolkit, or PyTorch's nvidia-* packages (gpu_check.sh).
      libcublas*|libcudart*|libcudnn*|libnccl*) ;;
      ld-linux*|libc.so.*|libm.so.*|libmvec.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|libutil.so.*)
        mkdir -p "$root/lib/glibc"; cp -L "$lib" "$root/lib/glibc/$name" ;;
      *) cp -L "$lib" "$root/lib/$name" ;;
    esac
  done
ldd --version | head -n1 | grep -o '[0-9]*\.[0-9]*$' >"$root/lib/glibc/VERSION"
cp scripts/gpu_check.sh scripts/reference_gpt.py "$root/scripts/"
cp "$data" "$root/data/corpus.txt"
mkdir -p "$(dirname "$out")"
tar -C "$stage" -cJf "$out" causeway-gpu
echo "$out: $(du -h "$out" | cut -f1) ($(ls "$root/lib" | wc -l) libraries)"
