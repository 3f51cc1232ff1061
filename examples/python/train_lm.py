#!/usr/bin/env python3
"""Trains the GPT-style model of `causeway train lm` on a text file, with the
training loop written in Python against causeway's public API. Same defaults,
same batches, same learning-rate schedule and the same tokens/s measure
(training time, evaluation excluded) as `causeway train lm`."""
import argparse
import json
import time

import numpy as np

import causeway as cw

p = argparse.ArgumentParser(description=__doc__)
p.add_argument("--data", required=True, help="a text file (character tokens)")
for flag, default in [("devices", 1), ("layers", 4), ("heads", 4), ("embed", 128),
                      ("context", 64), ("batch", 12), ("iters", 2000), ("warmup", 100),
                      ("eval-every", 250), ("eval-batches", 20), ("log-every", 100), ("seed", 1)]:
    p.add_argument("--" + flag, type=int, default=default, help=f"(default {default})")
p.add_argument("--lr", type=float, default=1e-3, help="(default 1e-3)")
p.add_argument("--min-lr", type=float, default=1e-4, help="(default 1e-4)")
p.add_argument("--json", action="store_true", help="print JSON lines")
a = p.parse_args()

data = cw.models.TextDataset.load(a.data, "chars", a.context)
config = dict(vocab=data.vocab_size, context=a.context, layers=a.layers, heads=a.heads,
              embed=a.embed)
cw.local_cluster(islands=1, hosts_per_island=1, devices_per_host=a.devices)
model = cw.models.GPT(config, cw.make_mesh({"data": a.devices, "model": 1}), a.batch, seed=a.seed)


def evaluate(it):
    """Mean loss over eval batches of each split, all dispatched before one is read."""
    losses = {s: [model.evaluate(*data.sample(s, a.seed, 1 + it, k, a.batch, a.context))
                  for k in range(a.eval_batches)] for s in ("train", "val")}
    return {s: float(np.mean([np.asarray(x) for x in v])) for s, v in losses.items()}


def log(**fields):
    print(json.dumps(fields) if a.json else "  ".join(f"{k} {v}" for k, v in fields.items()),
          flush=True)


pending, first_loss, evals, eval_s = [], None, {}, 0.0
start = time.monotonic()
for it in range(a.iters + 1):
    if (a.eval_every and it % a.eval_every == 0) or it == a.iters:
        while pending:  # read every loss still in flight, then evaluate
            i, loss, _ = pending.pop(0)
            first_loss = first_loss if first_loss is not None else float(np.asarray(loss))
        if a.eval_every:
            t = time.monotonic()
            evals = evaluate(it)
            eval_s += time.monotonic() - t
            log(event="eval", iter=it, train_loss=round(evals["train"], 4),
                val_loss=round(evals["val"], 4))
    if it == a.iters:
        break
    x, y = data.sample("train", a.seed, 0, it, a.batch, a.context)
    lr = cw.models.learning_rate(it, a.lr, a.min_lr, a.warmup, a.iters)
    pending.append((it, model.step(x, y, it, lr)[0], lr))  # returns at once
    while len(pending) > 4:  # read losses behind the dispatch front
        i, loss, lr_i = pending.pop(0)
        value = float(np.asarray(loss))
        first_loss = value if first_loss is None else first_loss
        if not np.isfinite(value):
            raise SystemExit(f"loss is {value} at iteration {i}")
        if a.log_every and i % a.log_every == 0:
            log(event="step", iter=i, loss=round(value, 4), lr=lr_i)
train_s = time.monotonic() - start - eval_s
log(event="summary", iters=a.iters, train_s=round(train_s, 3), initial_loss=first_loss,
    tokens_per_second=a.iters * a.batch * a.context / train_s,
    final_train_loss=evals.get("train"), final_val_loss=evals.get("val"))
