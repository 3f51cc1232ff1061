#!/usr/bin/env python3
"""Collectives among vulkan devices of one GPU: done by the GPU (one command
buffer: the reduction shader over every member's buffer, or buffer copies)
against the host-staged hub (each member's operand copied to host memory,
combined there, copied back), on the same devices in the same run.

    python3 python/bench/bench_vulkan_collectives.py [--causeway BIN] [--json]

Each round runs `causeway bench collective --device-kind vulkan` once with
CAUSEWAY_VULKAN_COLLECTIVES=gpu and once with =host (alternating which goes
first); the medians of the rounds' latencies and their ratio are reported
per operation and size.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--causeway", default="build/release/bin/causeway", help="the causeway binary")
p.add_argument("--ops", default="all-reduce,all-gather", help="comma-separated --op values")
p.add_argument("--bytes", default="64K,1M,16M", help="sizes, as bench collective's --bytes")
p.add_argument("--devices", type=int, default=4, help="vulkan devices, all on the first GPU")
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--min-seconds", type=float, default=0.5, help="per size and run")
p.add_argument("--json", action="store_true", help="one JSON object per operation and size")
a = p.parse_args()


def run(op, mode):
    env = dict(os.environ, CAUSEWAY_VULKAN_COLLECTIVES=mode)
    out = subprocess.run(
        [a.causeway, "bench", "collective", "--device-kind", "vulkan", "--devices",
         str(a.devices), "--op", op, "--bytes", a.bytes, "--min-seconds", str(a.min_seconds),
         "--json"], env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.exit(f"bench collective ({mode}) failed: {out.stderr.strip()}")
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {r["bytes"]: r["latency_us"] for r in rows}


results = []
for op in a.ops.split(","):
    latency = {"gpu": {}, "host": {}}
    for r in range(a.rounds):
        for mode in (("gpu", "host") if r % 2 == 0 else ("host", "gpu")):
            for size, us in run(op, mode).items():
                latency[mode].setdefault(size, []).append(us)
    for size in sorted(latency["gpu"]):
        gpu = statistics.median(latency["gpu"][size])
        host = statistics.median(latency["host"][size])
        results.append({"op": op, "bytes": size, "devices": a.devices, "rounds": a.rounds,
                        "gpu_us": gpu, "host_us": host, "gpu_over_host": gpu / host})

if a.json:
    for r in results:
        print(json.dumps(r))
else:
    print(f"{a.devices} vulkan devices on one GPU, medians of {a.rounds} rounds")
    print(f"{'op':>12} {'bytes':>10} {'gpu_us':>12} {'host_us':>12} {'gpu/host':>9}")
    for r in results:
        print(f"{r['op']:>12} {r['bytes']:>10} {r['gpu_us']:>12.1f} {r['host_us']:>12.1f} "
              f"{r['gpu_over_host']:>9.2f}")
