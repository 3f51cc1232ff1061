#!/usr/bin/env bash
# The vulkan kind on a real GPU, in one command of at most 5 minutes:
#   1. the GPUs the kind sees (`causeway gpus`);
#   2. the kind's op tests, the device suite on vulkan devices, and the
#      conformance suite on an embedded vulkan cluster;
#   3. a while loop's cost per iteration on the vulkan and the cpu kind
#      (control_flow_bench), and `bench matmul` on the vulkan kind at 1024
#      and 4096 (GFLOP/s, with single-threaded OpenBLAS and Eigen on the
#      host as the baselines of the same run), and the kernel alone at 4096
#      from the GPU's timestamps (which kernel ran, and its GFLOP/s);
#   4. an all-reduce among 4 vulkan devices of the GPU, done by the GPU and
#      through the host (CAUSEWAY_VULKAN_COLLECTIVES=gpu / host): latency;
#   5. a short `train lm` on one vulkan device and on the cpu kind with the
#      same seed: tokens/s of each, and the largest difference of their
#      logged losses;
#   6. where the cuda kind sees the GPU (docs/CUDA.md): its op tests and
#      device suite, `bench matmul --device-kind cuda`, and the same short
#      `train lm` (tokens/s, and the largest loss difference from cpu);
#   7. where python3 has PyTorch with CUDA, the same matrix product and the
#      same GPT (scripts/reference_gpt.py) on the GPU: the ratios of the
#      vulkan and cuda kinds' figures to PyTorch's.
# Then one summary. Exit status 0 when every step passed.
#
#   scripts/gpu_check.sh [--gpu N] [--data FILE] [--build DIR]
#
# Runs from a build tree (default build/release) or from the bundle that
# scripts/gpu_bundle.sh makes for a machine without Debian's packages: there
# the binaries run under the bundle's own dynamic loader and libraries, and
# the GPU's Vulkan driver (its ICD) is found as docs/VULKAN.md says.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
gpu=0
data=""
build=""
while (($#)); do
  case "$1" in
    --gpu) gpu=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

# Where the binaries are, and how to run them.
run=()
if [[ -z "$build" && -x "$here/../bin/causeway" && -d "$here/../lib" ]]; then
  root=$(cd "$here/.." && pwd)  # the bundle
  bin=$root/bin
  # The machine's glibc where it is as new as the one the binaries were
  # built against (the GPU driver's libraries are built for it); else the
  # bundle's, under its own dynamic loader.
  built=$(cat "$root/lib/glibc/VERSION")
  have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  if [[ -n "$have" ]] && [[ $(printf '%s\n%s\n' "$built" "$have" | sort -V | head -n1) == "$built" ]]; then
    export LD_LIBRARY_PATH=$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "glibc $have here (built against $built): the machine's"
  else
    loader=$(ls "$root"/lib/glibc/ld-linux-*.so.* | head -n1)
    run=("$loader" --library-path "$root/lib/glibc:$root/lib")
    echo "glibc ${have:-unknown} here (built against $built): the bundle's"
  fi
  [[ -z "$data" && -f "$root/data/corpus.txt" ]] && data=$root/data/corpus.txt
else
  build=${build:-$here/../build/release}
  bin=$build/bin
  [[ -z "$data" ]] && data=$here/../README.md
fi
if [[ ! -x "$bin/causeway" ]]; then
  echo "gpu_check.sh: no causeway binary in $bin (build it: make build)" >&2
  exit 2
fi
if [[ ! -f "$data" ]]; then
  echo "gpu_check.sh: no text to train on: $data" >&2
  exit 2
fi

# The Vulkan driver of an NVIDIA GPU: where the system lists no ICD (a
# container given the driver's libraries but not its Vulkan manifest), one is
# written for libGLX_nvidia.so.0 when that library is there.
if [[ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ]] &&
   ! ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json >/dev/null 2>&1; then
  # Where a container runtime mounts the driver's manifest.
  for f in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; do
    [[ -f $f ]] && export VK_ICD_FILENAMES=$f && echo "using the Vulkan driver manifest $f"
  done
fi
if [[ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ]] &&
   ! ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json >/dev/null 2>&1; then
  for dir in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/nvidia/lib64; do
    if [[ -e $dir/libGLX_nvidia.so.0 ]]; then
      icd=$(mktemp --suffix=.json)
      printf '{"file_format_version":"1.0.0","ICD":{"library_path":"%s","api_version":"1.3"}}\n' \
        "$dir/libGLX_nvidia.so.0" >"$icd"
      export VK_ICD_FILENAMES=$icd
      echo "using the NVIDIA Vulkan driver $dir/libGLX_nvidia.so.0 (manifest written to $icd)"
      break
    fi
  done
fi

# The cuda kind's cuBLASLt: the bundle does not carry NVIDIA's libraries;
# where the machine has no CUDA toolkit on the loader's path, PyTorch's
# nvidia-cublas package has them.
py=${PYTHON:-python3}
cublas=$(env -u LD_LIBRARY_PATH "$py" -c \
  'import os, nvidia.cublas as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)
if [[ -n "$cublas" && -d "$cublas" ]]; then
  if ((${#run[@]})); then
    run[2]="${run[2]}:$cublas"
  else
    export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$cublas
  fi
  echo "cuBLASLt from $cublas"
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
summary=()
failed=0
step() {  # step NAME SECONDS COMMAND...: runs it, keeps its output in $out/NAME.
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name" 2>&1
  local rc=$?
  if ((rc == 0)); then
    summary+=("ok    $name ($((SECONDS - t0)) s)")
  else
    failed=1
    ((rc == 124)) && why="timed out after ${limit} s" || why="exit $rc"
    summary+=("FAIL  $name ($why): $(grep -v '^\s*$' "$out/$name" | tail -n1)")
  fi
  return $rc
}

echo "== GPUs"
if ! step gpus 30 "${run[@]}" "$bin/causeway" gpus; then
  cat "$out/gpus"
  printf '%s\n' "${summary[@]}"
  exit 1
fi
cat "$out/gpus"
# Every later command uses GPU $gpu.
cw=("${run[@]}" "$bin/causeway" --gpu "$gpu")

echo "== op tests and conformance suite on vulkan devices"
export CAUSEWAY_VULKAN_GPU=$gpu
export CAUSEWAY_BIN=$bin/causeway  # the suite's process clusters run it
if [[ -x "$bin/vulkan_ops_test" ]]; then
  step vulkan_ops_test 60 "${run[@]}" "$bin/vulkan_ops_test" --gtest_brief=1
  tail -n3 "$out/vulkan_ops_test"
fi
if [[ -x "$bin/device_test" ]]; then
  step device_test 60 "${run[@]}" "$bin/device_test" --gtest_brief=1 --gtest_filter='*vulkan*'
  tail -n3 "$out/device_test"
fi
if [[ -x "$bin/conformance_test" ]]; then
  step conformance 120 "${run[@]}" "$bin/conformance_test" --gtest_brief=1 \
    --gtest_filter='*EmbeddedVulkan*'
  tail -n3 "$out/conformance"
fi

echo "== a while loop's cost per iteration, vulkan and cpu (bench/control_flow_bench.cc)"
if [[ -x "$bin/control_flow_bench" ]]; then
  step loops 60 "${run[@]}" "$bin/control_flow_bench" --benchmark_filter='/100/' \
    --benchmark_min_time=0.2
  cat "$out/loops"
  while read -r kind per; do
    summary+=("while loop, per iteration: $kind $per")
  done < <(sed -n 's|^BM_WhileLoop/\([a-z]*\)/100/.*per_iteration=\([0-9.]*[a-z]*s\).*|\1 \2|p' "$out/loops")
fi

echo "== bench matmul"
# 4096 on a GPU (the size of the issue's FP32-peak figure); lavapipe, the
# CPU implementation, takes minutes there and stops at 1024.
sizes=1024,4096
sed -n "$((gpu + 1))p" "$out/gpus" | grep -q llvmpipe && sizes=1024
step matmul 120 "${cw[@]}" bench matmul --device-kind vulkan --sizes "$sizes" --min-seconds 0.5
cat "$out/matmul"
while read -r line; do
  summary+=("bench matmul: $line")
done < <(grep -o 'matmul [0-9x]*: function (vulkan) [0-9.]* GFLOP/s' "$out/matmul")
# The kernel alone at the largest size, from the GPU's own timestamps
# (CAUSEWAY_VULKAN_PROFILE): which kernel ChooseVariant took, and its rate
# without the launches around it.
big=${sizes##*,}
step matmul_profile 90 env CAUSEWAY_VULKAN_PROFILE=1 "${cw[@]}" bench matmul \
  --device-kind vulkan --sizes "$big" --min-seconds 0.5
grep -E '^ +matmul_' "$out/matmul_profile" || true
while read -r kernel n ms; do
  summary+=("matmul kernel alone at $big: $kernel, $n dispatches in $ms ms of GPU time, $(
    awk -v n="$n" -v ms="$ms" -v s="$big" 'BEGIN { printf "%.1f", n * 2 * s * s * s / (ms * 1e-3) / 1e9 }'
  ) GFLOP/s")
done < <(awk '/^ +matmul_f32/ { print $1, $3, $4 }' "$out/matmul_profile")

echo "== all-reduce among 4 vulkan devices of the GPU: on the GPU, and through the host"
for mode in gpu host; do
  step "collective_$mode" 60 env CAUSEWAY_VULKAN_COLLECTIVES="$mode" "${cw[@]}" bench collective \
    --device-kind vulkan --devices 4 --bytes 1M,16M --min-seconds 0.3
  while read -r bytes latency _; do
    summary+=("all-reduce of $bytes bytes over 4 devices, $mode: $latency us")
  done < <(grep -E '^ +[0-9]+ ' "$out/collective_$mode")
done

echo "== train lm, 30 iterations, on vulkan and cpu"
for kind in vulkan cpu; do
  step "train_$kind" 90 "${cw[@]}" train lm --device-kind "$kind" --data "$data" --iters 30 \
    --log-every 5 --eval-every 0 --json
done
losses() { grep '"event":"step"' "$1" | grep -o '"loss":[-0-9.eE+]*' | cut -d: -f2; }
rate() { grep '"event":"summary"' "$1" | grep -o '"tokens_per_s":[0-9.eE+]*' | cut -d: -f2; }
if [[ -s "$out/train_vulkan" && -s "$out/train_cpu" ]]; then
  diff=$(paste <(losses "$out/train_vulkan") <(losses "$out/train_cpu") |
         awk '{d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d} END {printf "%.2e", m}')
  echo "losses (vulkan, cpu):"; paste <(losses "$out/train_vulkan") <(losses "$out/train_cpu")
  summary+=("train lm: largest loss difference vulkan vs cpu $diff; tokens/s vulkan $(rate "$out/train_vulkan"), cpu $(rate "$out/train_cpu")")
fi

if grep -q '^cuda ' "$out/gpus"; then
  echo "== the cuda kind: op tests, device suite, bench matmul, train lm"
  export CAUSEWAY_CUDA_GPU=$gpu
  if [[ -x "$bin/cuda_ops_test" ]]; then
    step cuda_ops_test 90 "${run[@]}" "$bin/cuda_ops_test" --gtest_brief=1
    tail -n3 "$out/cuda_ops_test"
  fi
  if [[ -x "$bin/device_test" ]]; then
    step cuda_device_test 60 "${run[@]}" "$bin/device_test" --gtest_brief=1 --gtest_filter='*cuda*'
    tail -n3 "$out/cuda_device_test"
  fi
  step cuda_matmul 120 "${cw[@]}" bench matmul --device-kind cuda --sizes 1024,4096 \
    --min-seconds 0.5
  cat "$out/cuda_matmul"
  while read -r line; do
    summary+=("bench matmul: $line")
  done < <(grep -o 'matmul [0-9x]*: function (cuda) [0-9.]* GFLOP/s' "$out/cuda_matmul")
  step train_cuda 120 "${cw[@]}" train lm --device-kind cuda --data "$data" --iters 30 \
    --log-every 5 --eval-every 0 --json
  if [[ -s "$out/train_cuda" && -s "$out/train_cpu" ]]; then
    diff=$(paste <(losses "$out/train_cuda") <(losses "$out/train_cpu") |
           awk '{d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d} END {printf "%.2e", m}')
    summary+=("train lm: largest loss difference cuda vs cpu $diff; tokens/s cuda $(rate "$out/train_cuda")")
  fi
else
  summary+=("the cuda kind sees no GPU here (causeway gpus), so none of its checks ran")
fi

echo "== the same work in PyTorch on the same GPU (where python3 has torch with CUDA)"
# The baselines of the issue's ratios, in the same run: a matrix product of
# the largest size in FP32 (TF32 off: cuBLAS's FP32 rate), and the same GPT
# and recipe (scripts/reference_gpt.py) for as many iterations. Python runs
# without the bundle's libraries, which are not torch's.
if env -u LD_LIBRARY_PATH "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
    >/dev/null 2>&1; then
  step torch_matmul 90 env -u LD_LIBRARY_PATH "$py" -c "
import time, torch
torch.backends.cuda.matmul.allow_tf32 = False
n = $big
a = torch.randn(n, n, device='cuda'); b = torch.randn(n, n, device='cuda')
for _ in range(3): a @ b
torch.cuda.synchronize(); k = 20; t = time.time()
for _ in range(k): a @ b
torch.cuda.synchronize()
print('torch fp32 matmul', n, round(2 * n ** 3 * k / (time.time() - t) / 1e9, 1), 'GFLOP/s')
"
  cat "$out/torch_matmul"
  torch_mm=$(grep -o 'torch fp32 matmul [0-9]* [0-9.]*' "$out/torch_matmul" | awk '{print $5}')
  for kind in vulkan cuda; do
    f=$out/matmul
    [[ $kind == cuda ]] && f=$out/cuda_matmul
    [[ -f $f ]] || continue
    ours_mm=$(grep -o "matmul ${big}x${big}x${big}: function ($kind) [0-9.]*" "$f" | awk '{print $5}')
    if [[ -n "$torch_mm" && -n "$ours_mm" ]]; then
      summary+=("matmul at $big: $kind $ours_mm GFLOP/s, PyTorch FP32 $torch_mm GFLOP/s, ratio $(
        awk -v a="$ours_mm" -v b="$torch_mm" 'BEGIN { printf "%.3f", a / b }')")
    fi
  done
  step torch_train 150 env -u LD_LIBRARY_PATH "$py" "$here/reference_gpt.py" --data "$data" \
    --iters 30 --eval-every 0 --device cuda
  torch_rate=$(grep -o '"tokens_per_s": [0-9.]*' "$out/torch_train" | awk '{print $2}')
  for kind in vulkan cuda; do
    [[ -f $out/train_$kind ]] || continue
    ours_rate=$(rate "$out/train_$kind" 2>/dev/null)
    if [[ -n "$torch_rate" && -n "$ours_rate" ]]; then
      summary+=("train lm, 30 iterations: $kind $ours_rate tokens/s, PyTorch on the GPU $torch_rate, ratio $(
        awk -v a="$ours_rate" -v b="$torch_rate" 'BEGIN { printf "%.3f", a / b }')")
    fi
  done
else
  summary+=("PyTorch with CUDA: not in $py here, so no ratios to it (pip install torch)")
fi

echo
echo "================ gpu_check summary ================"
grep -v '^\s*$' "$out/gpus" | sed 's/^/gpu /'
printf '%s\n' "${summary[@]}"
exit $failed
