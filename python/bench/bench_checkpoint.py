#!/usr/bin/env python3
"""Training step time while sharded asynchronous checkpoints are being saved,
against the same steps with no save, rounds interleaved in one process.

    PYTHONPATH=build/release/python python3 python/bench/bench_checkpoint.py \\
        [--steps 100] [--every 10] [--rounds 3] [--devices 2] [--json]

The model is `causeway train lm`'s GPT with its defaults (4 layers, width 128,
batch 12 x 64 tokens) on random tokens. With saves, every `--every` steps the
parameters and both AdamW moments are saved (Checkpointer.save returns at
once; training goes on while the hosts write), keeping 2 steps. Step time is
the wall time of the steps, from the first dispatch to the last loss read,
over the number of steps (the saves still writing then are waited for after).
Losses are read 4 steps behind the dispatch front, as `train lm` reads them.
"""
import argparse
import json
import statistics
import tempfile
import time

import numpy as np

import causeway as cw

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--steps", type=int, default=100)
p.add_argument("--every", type=int, default=10)
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--devices", type=int, default=2)
p.add_argument("--json", action="store_true")
a = p.parse_args()

cw.local_cluster(islands=1, hosts_per_island=a.devices, devices_per_host=1)
config = dict(vocab=65, context=64, layers=4, heads=4, embed=128)
batch = 12
model = cw.models.GPT(config, cw.make_mesh({"data": a.devices, "model": 1}), batch, seed=1)
rng = np.random.default_rng(0)
tokens = rng.integers(0, config["vocab"], size=(batch, config["context"]), dtype=np.int32)
state_bytes = 3 * sum(int(np.prod(s.shape)) * 4 for s in model.specs)


def run(save_root):
    ckpt = cw.Checkpointer(save_root, keep=2) if save_root else None
    saves, step0 = [], run.step
    model.step(tokens, tokens, 0, 1e-3)[0].fetch()  # a warm pipeline
    start = time.monotonic()
    losses = []
    for k in range(a.steps):
        it = step0 + k
        losses.append(model.step(tokens, tokens, it, 1e-3)[0])
        # Losses are read behind the dispatch front, as `train lm` does: the
        # steps run ahead by at most 4 (each one queued holds its outputs).
        if len(losses) > 4:
            losses.pop(0).fetch()
        if ckpt is not None and k % a.every == 0:
            arrays = {}
            for s, x, m, v in zip(model.specs, model.params, model.m, model.v):
                arrays[s.name], arrays[s.name + ".m"], arrays[s.name + ".v"] = x, m, v
            saves.append(ckpt.save(it, arrays))
    for loss in losses:
        loss.fetch()
    elapsed = time.monotonic() - start
    for f in saves:
        f.wait(timeout=600)
    run.step += a.steps + 1
    return elapsed / a.steps, len(saves)


run.step = 1
plain, saving = [], []
for r in range(a.rounds):
    plain.append(run(None)[0])
    with tempfile.TemporaryDirectory() as d:
        saving.append(run(d)[0])
out = {"steps": a.steps, "every": a.every, "rounds": a.rounds, "devices": a.devices,
       "state_bytes_per_save": state_bytes,
       "step_ms_without": 1e3 * statistics.median(plain),
       "step_ms_with_saves": 1e3 * statistics.median(saving),
       "rounds_without_ms": [round(1e3 * x, 2) for x in plain],
       "rounds_with_ms": [round(1e3 * x, 2) for x in saving]}
out["ratio"] = out["step_ms_with_saves"] / out["step_ms_without"]
print(json.dumps(out) if a.json else
      f"step {out['step_ms_without']:.2f} ms without saves, {out['step_ms_with_saves']:.2f} ms "
      f"with a save of {state_bytes / 2**20:.1f} MiB every {a.every} steps: "
      f"ratio {out['ratio']:.3f}")
