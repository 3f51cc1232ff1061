#!/usr/bin/env python3
"""Dispatch cost of a Python call of a compiled trivial function, against the
same calls made from C++ through the same client, in one process.

    PYTHONPATH=build/release/python python3 python/bench/bench_dispatch.py [--json]

Each round makes --calls calls of f(x) = x + 1 on a one-device mesh (the
outputs are dropped, as in a loop that keeps only the last), first from
Python, then from C++ (`bench_cpp_calls`), waiting for the devices to drain
between; rounds alternate, and the medians are reported.
"""
import argparse
import json
import statistics
import time

import numpy as np

import causeway as cw

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--calls", type=int, default=2000, help="calls per round (default 2000)")
p.add_argument("--rounds", type=int, default=7, help="rounds (default 7)")
p.add_argument("--json", action="store_true")
a = p.parse_args()

cw.local_cluster(islands=1, hosts_per_island=1, devices_per_host=1)
mesh = cw.make_mesh({"x": 1})
s = cw.NamedSharding(mesh, cw.P())
f = cw.compile(lambda x: x + 1.0, in_shardings=s, out_shardings=s)
x = cw.device_put(np.zeros(1, np.float32), s)
f(x).block_until_ready()  # trace, compile and lower once
compiled = f.specialize([((1,), "float32")])


def drain():
    f(x).block_until_ready()
    x.client.flush()


py_us, cpp_us = [], []
for _ in range(a.rounds):
    drain()
    t = time.perf_counter()
    for _ in range(a.calls):
        y = f(x)
    py_us.append((time.perf_counter() - t) / a.calls * 1e6)
    del y
    drain()
    cpp_us.append(cw._causeway.bench_cpp_calls(compiled, [x], a.calls) / a.calls * 1e6)
result = {"calls_per_round": a.calls, "rounds": a.rounds,
          "python_us_per_call": statistics.median(py_us),
          "cpp_us_per_call": statistics.median(cpp_us)}
result["python_over_cpp"] = result["python_us_per_call"] / result["cpp_us_per_call"]
result["python_overhead_us"] = result["python_us_per_call"] - result["cpp_us_per_call"]
if a.json:
    print(json.dumps(result))
else:
    print(f"Python call: {result['python_us_per_call']:.2f} us; the same call from C++: "
          f"{result['cpp_us_per_call']:.2f} us; Python / C++ = {result['python_over_cpp']:.2f} "
          f"(+{result['python_overhead_us']:.2f} us)")
