#!/usr/bin/env bash
# Reproduces every `causeway bench` and `causeway sim` result in docs/BENCHMARKS.md: runs each
# configuration, appends its JSON line to OUT (default
# build/bench/results.jsonl), then draws the plots with plot_bench.py.
# Takes a few minutes on a 2-core machine. With LM_DATA=path/to/text (the
# language-model section uses tinyshakespeare.txt) it also runs the GPT
# benchmarks into lm.jsonl beside OUT (about 20 more minutes).
#
#   [LM_DATA=FILE] scripts/bench_sweep.sh [OUT] [SECONDS_PER_CONFIGURATION]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-build/bench/results.jsonl}
secs=${2:-1}
bin=build/release/bin/causeway
[[ -x $bin ]] || { echo "build first: make build" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
: > "$out"
run() { echo "+ causeway $*" >&2; "$bin" "$@" --json | tee -a "$out"; }

# Dispatch: OpByOp / Chained / Fused, single vs multi controller.
for hosts in 1 4; do
  for mode in opbyop chained fused; do
    for controller in single multi; do
      run bench dispatch --mode "$mode" --controller "$controller" --devices 8 --hosts "$hosts" \
        --seconds "$secs" --repeat 3
    done
  done
done
# Control-plane cost against the number of devices.
for devices in 1 2 4 8 16; do
  for controller in single multi; do
    run bench dispatch --mode chained --controller "$controller" --devices "$devices" \
      --seconds "$secs"
  done
done
# Utilisation against computation length, 32 devices over 4 hosts.
# The same with every device a fiber of a pool of as many threads as cores.
for threads in 0 "$(nproc)"; do
  run bench utilization --devices 32 --hosts 4 --compute-us 100,250,500,1000,2500 \
    --controller both --seconds "$secs" --device-threads "$threads"
done
# Pipeline (docs/PIPELINE.md): the bubble against the GPipe bound for S = 2, 4, 8 stages and
# M = 4 S micro-batches, stage passes sized like the GPT's (1 + 2 ms, 96 KiB activations);
# parallel vs sequential dispatch at 100 us and 1 ms; two islands vs one.
for stages in 2 4 8; do
  for schedule in gpipe 1f1b; do
    run bench pipeline --stages "$stages" --schedule "$schedule" --forward-us 1000 --activation-kb 96
  done
done
for forward in 100 1000; do
  for dispatch in parallel sequential; do
    run bench pipeline --stages 4 --forward-us "$forward" --dispatch "$dispatch" --activation-kb 96
  done
done
for islands in 1 2; do
  run bench pipeline --stages 4 --forward-us 1000 --activation-kb 96 --islands "$islands" \
    --dcn-latency-us 100 --dcn-gbps 10
done

# The distributed cluster: 4 worker processes x 2 devices on 127.0.0.1.
exec 3< <("$bin" cluster up --islands 1 --hosts-per-island 4 --devices-per-host 2 --json)
up_pid=$!
trap 'kill -INT "$up_pid" 2>/dev/null || true' EXIT
read -r -t 60 -u 3 line
address=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["address"])' "$line")
export CAUSEWAY_TOKEN=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["token"])' "$line")
export CAUSEWAY_WORKER_TOKEN=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["worker_token"])' "$line")
# The single controller only: the multi-controller baseline's loops run beside
# their hosts, on the embedded cluster (tools/spmd_loop.h).
for mode in opbyop chained fused; do
  run bench dispatch --cluster "$address" --mode "$mode" --controller single \
    --devices 8 --seconds "$secs" --repeat 3
done
# Four weighted clients, each a process of its own (docs/BENCHMARKS.md, "Multi-tenancy").
run bench tenancy --cluster "$address" --clients 4 --weights 1,2,4,8 --compute-us 330 \
  --seconds 10 --aggregate-seconds 3
kill -INT "$up_pid"

# Multi-tenancy (docs/BENCHMARKS.md, "Multi-tenancy"): four weighted clients on one
# island, and what proportional share costs dispatch against FIFO.
run bench tenancy --clients 4 --weights 1,2,4,8 --compute-us 330 --seconds 10
for mode in opbyop chained fused; do
  for scheduling in fifo share; do
    run bench dispatch --mode "$mode" --devices 8 --seconds "$secs" --repeat 3 \
      --scheduling "$scheduling"
  done
done

# The simulator (docs/BENCHMARKS.md, "Scaling past one machine"): Figs. 5 and 6 to 2048
# devices, tenancy and pipelines on simulated hosts, and the simulation of this machine's
# embedded cluster against the real one. About 3 minutes.
hosts=1,2,4,8,16,32,64,128,256,512
run sim dispatch --hosts "$hosts" --devices-per-host 4 --compute-us 0
run sim dispatch --hosts "$hosts" --devices-per-host 4 --compute-us 0 --cpu measured
run sim dispatch --hosts 2,8,32,128,512 --devices-per-host 4 \
  --compute-us 0,100,250,500,1000,2500,5000,10000,25000
for h in 1 8 32 128; do
  run sim tenancy --hosts "$h" --devices-per-host 4 --seconds 1
done
run sim pipeline --stages 4
run sim pipeline --stages 4 --islands 2
run sim pipeline --stages 16 --forward-us 100 --schedule 1f1b
run sim pipeline --stages 32 --forward-us 1000 --schedule 1f1b --islands 4
run sim validate --repeat 3
# Collectives (the "Collectives" section): embedded, then across 2 and 4 worker processes on
# the data plane and on Gloo, interleaved.
run bench collective --op all-reduce --devices 8 --hosts 2 --bytes 4K,64K,1M,16M,64M
for round in 1 2; do
  for p in 2 4; do
    run bench collective --op all-reduce --processes "$p" --collectives grpc \
        --bytes 4K,64K,1M,16M,64M
    run bench collective --op all-reduce --processes "$p" --collectives gloo \
        --gloo-from-bytes 0 --bytes 4K,64K,1M,16M,64M
  done
  for c in grpc gloo; do
    run bench collective --op all-to-all --processes 4 --collectives "$c" --gloo-from-bytes 0 \
        --bytes 1M,16M
  done
done

/usr/bin/python3 scripts/plot_bench.py "$out" "$(dirname "$out")"

# The language model (docs/BENCHMARKS.md, "Language model"). An
# OPENBLAS_CORETYPE in the environment is respected: unset it to let causeway
# pick the widest GEMM kernels the CPU runs (docs/IR.md).
if [[ -n "${LM_DATA:-}" ]]; then
  lm_out="$(dirname "$out")/lm.jsonl"
  : > "$lm_out"
  lm() { echo "+ causeway $*" >&2; "$bin" "$@" --json | tee -a "$lm_out"; }
  lm bench matmul --sizes 768x128x384,768x128x512,768x512x128,384x128x512,512
  lm bench lm --data "$LM_DATA" --layouts 1x1,2x1,1x2 --kernels fused,op-by-op --iters 80 \
    --warmup 10 --rounds 5
  for devices in 1 2; do
    lm train lm --data "$LM_DATA" --devices "$devices" --log-every 250
  done
fi
