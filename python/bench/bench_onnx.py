#!/usr/bin/env python3
"""ONNX models on Causeway against the same models in PyTorch, in one run on
this machine: ResNet-18 at batch 32 and a GPT-2-shaped decoder (12 layers,
width 768) at batch 8 x 128 tokens, with random weights (onnx_models.py
builds and exports them). Each round runs every configuration --iters times
after a warm-up: PyTorch (eval, no grad; on every core, and on 1 thread),
Causeway on 1 device (a device is one thread), and on 2 devices with the
batch split over them; rounds alternate,
and the medians of samples/s are reported with their ratios, and the largest
relative difference of Causeway's outputs from PyTorch's.

    scripts/install-deps.sh --bench     # PyTorch and torchvision, from Debian
    PYTHONPATH=build/release/python /usr/bin/python3 python/bench/bench_onnx.py [--json]
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

import causeway as cw

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_models  # noqa: E402

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--names", default="resnet18,gpt2_decoder")
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--iters", type=int, default=2, help="timed runs per round and configuration")
p.add_argument("--work", default=None, help="folder for the exported models (default: a temporary one)")
p.add_argument("--json", action="store_true")
a = p.parse_args()

work = a.work or tempfile.mkdtemp(prefix="causeway_onnx_")
os.makedirs(work, exist_ok=True)
# The decoder needs 1.4 GB of outputs and temporaries on one device.
cw.local_cluster(1, 1, 2, device_memory_bytes=4 << 30)
one = cw.NamedSharding(cw.make_mesh({"data": 1}), cw.P())
mesh2 = cw.make_mesh({"data": 2})
split = cw.NamedSharding(mesh2, cw.P("data"))


# Debian's PyTorch does its matrix products in the system OpenBLAS, whose
# thread count torch.set_num_threads does not set: left alone, "1 thread"
# would multiply matrices on every core. It is the library Causeway's cpu
# devices call too, each on one thread (they set it to 1 when they compile).
try:
    _openblas = ctypes.CDLL("libopenblas.so.0")
except OSError:
    _openblas = None
    print("warning: libopenblas.so.0 not found; PyTorch's BLAS thread count is not set",
          file=sys.stderr)


def blas_threads(n):
    if _openblas is not None:
        _openblas.openblas_set_num_threads(n)


def timed(run, iters):
    out = run()  # warm up (the first time: import and compile)
    start = time.perf_counter()
    for _ in range(iters):
        out = run()
    return (time.perf_counter() - start) / iters, out


results = []
for name, model, example in onnx_models.full_models():
    if name not in a.names.split(","):
        continue
    onnx_models.export(name, model, example, work, dynamic=True)
    path = os.path.join(work, f"{name}.onnx")
    x = example.numpy()
    batch = x.shape[0]
    model.eval()
    m1 = cw.onnx.load(path, in_shardings=one, out_shardings=one)
    m2 = cw.onnx.load(path, in_shardings=split, out_shardings=split)
    x1, x2 = cw.device_put(x, one), cw.device_put(x, split)

    def torch_run():
        with torch.no_grad():
            return model(example).numpy()

    # PyTorch on every core of the machine, and on one (as a Causeway device
    # is one thread). Its default here is 1 thread (OpenMP's).
    threads = os.cpu_count() or 1

    def torch_on(n):
        def run():
            torch.set_num_threads(n)
            blas_threads(n)
            try:
                return torch_run()
            finally:
                blas_threads(1)  # what Causeway's devices run with
        return run

    runs = {"pytorch": torch_on(threads),
            "pytorch_1_thread": torch_on(1),
            "causeway_1": lambda: np.asarray(m1(x1)[0]),
            "causeway_2": lambda: np.asarray(m2(x2)[0])}
    rate = {k: [] for k in runs}
    diff = {}
    want = torch_on(1)()
    for r in range(a.rounds):
        order = list(runs) if r % 2 == 0 else list(reversed(list(runs)))
        for k in order:
            s, out = timed(runs[k], a.iters)
            rate[k].append(batch / s)
            if k.startswith("causeway"):
                d = float(np.max(np.abs(out - want)) / max(float(np.max(np.abs(want))), 1e-12))
                diff[k] = max(diff.get(k, 0.0), d)
    med = {k: statistics.median(v) for k, v in rate.items()}
    results.append({"model": name, "batch": int(batch), "rounds": a.rounds,
                    "samples_per_s": med,
                    "pytorch_threads": threads,
                    "causeway_1_over_pytorch": med["causeway_1"] / med["pytorch"],
                    "causeway_1_over_pytorch_1_thread": med["causeway_1"] / med["pytorch_1_thread"],
                    "causeway_2_over_pytorch": med["causeway_2"] / med["pytorch"],
                    "causeway_2_over_1": med["causeway_2"] / med["causeway_1"],
                    "max_diff_relative_to_max": diff})

if a.json:
    for r in results:
        print(json.dumps(r))
else:
    for r in results:
        s = r["samples_per_s"]
        print(f"{r['model']} (batch {r['batch']}, medians of {r['rounds']} rounds), samples/s: "
              f"PyTorch {s['pytorch']:.2f} ({r['pytorch_threads']} threads), "
              f"{s['pytorch_1_thread']:.2f} (1 thread); Causeway 1 device {s['causeway_1']:.2f} "
              f"({r['causeway_1_over_pytorch']:.2f}x PyTorch, "
              f"{r['causeway_1_over_pytorch_1_thread']:.2f}x its 1 thread), 2 devices "
              f"{s['causeway_2']:.2f} ({r['causeway_2_over_1']:.2f}x of 1, "
              f"{r['causeway_2_over_pytorch']:.2f}x PyTorch); largest difference "
              f"{max(r['max_diff_relative_to_max'].values()):.2e} of the largest output")
