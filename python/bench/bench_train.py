#!/usr/bin/env python3
"""Training throughput of the Python loop (examples/python/train_lm.py)
against `causeway train lm` with the same settings, rounds interleaved.

    PYTHONPATH=build/release/python python3 python/bench/bench_train.py \\
        --data tinyshakespeare.txt [--iters 300] [--rounds 3] [--json]

Both measure tokens/s over training time (evaluation excluded; none is run).
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--data", required=True)
p.add_argument("--iters", type=int, default=300)
p.add_argument("--devices", type=int, default=1)
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--causeway", default=str(ROOT / "build/release/bin/causeway"))
p.add_argument("--json", action="store_true")
a = p.parse_args()

common = ["--data", a.data, "--iters", str(a.iters), "--devices", str(a.devices),
          "--eval-every", "0", "--json"]
py, cpp = [], []
for _ in range(a.rounds):
    out = subprocess.run([sys.executable, str(ROOT / "examples/python/train_lm.py"), *common,
                          "--log-every", "0"], check=True, capture_output=True, text=True).stdout
    py.append(json.loads(out.strip().splitlines()[-1])["tokens_per_second"])
    out = subprocess.run([a.causeway, "train", "lm", *common], check=True, capture_output=True,
                         text=True).stdout
    cpp.append([json.loads(line) for line in out.splitlines() if '"summary"' in line][-1]
               ["tokens_per_s"])
r = {"iters": a.iters, "devices": a.devices, "rounds": a.rounds,
     "python_tokens_per_s": statistics.median(py), "cpp_tokens_per_s": statistics.median(cpp)}
r["python_over_cpp"] = r["python_tokens_per_s"] / r["cpp_tokens_per_s"]
print(json.dumps(r) if a.json else
      f"Python loop {r['python_tokens_per_s']:.0f} tokens/s, causeway train lm "
      f"{r['cpp_tokens_per_s']:.0f} tokens/s: ratio {r['python_over_cpp']:.3f}")
