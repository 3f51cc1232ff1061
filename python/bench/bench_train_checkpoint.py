#!/usr/bin/env python3
"""`causeway train lm` throughput with checkpoints every N iterations, in
each layout, against the same run with none, rounds interleaved.

    python3 python/bench/bench_train_checkpoint.py --data tinyshakespeare.txt \\
        [--iters 300] [--every 25] [--devices 1] [--rounds 3] [--json]

Each run is `train lm --eval-every 0` with its defaults; tokens/s is the
command's own (training time). `file` is the gathered checkpoint (the steps
in flight drain, the state is fetched to the client, which writes it);
`sharded` is the hosts' asynchronous one (docs/CHECKPOINT.md).
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--data", required=True)
p.add_argument("--iters", type=int, default=300)
p.add_argument("--every", type=int, default=25)
p.add_argument("--devices", type=int, default=1)
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--causeway", default=str(ROOT / "build/release/bin/causeway"))
p.add_argument("--json", action="store_true")
a = p.parse_args()

modes = ["none", "sharded", "file"]
seen = {m: [] for m in modes}
for _ in range(a.rounds):
    for mode in modes:
        with tempfile.TemporaryDirectory() as d:
            cmd = [a.causeway, "train", "lm", "--data", a.data, "--iters", str(a.iters),
                   "--devices", str(a.devices), "--eval-every", "0", "--log-every", "0", "--json"]
            if mode != "none":
                cmd += ["--checkpoint", d, "--checkpoint-every", str(a.every),
                        "--checkpoint-format", mode]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            summary = [json.loads(l) for l in out.splitlines() if '"summary"' in l][-1]
            seen[mode].append(summary["tokens_per_s"])
r = {"iters": a.iters, "every": a.every, "devices": a.devices, "rounds": a.rounds}
for mode in modes:
    r[f"{mode}_tokens_per_s"] = statistics.median(seen[mode])
    r[f"{mode}_rounds"] = [round(x) for x in seen[mode]]
for mode in ("sharded", "file"):
    r[f"{mode}_over_none"] = r[f"{mode}_tokens_per_s"] / r["none_tokens_per_s"]
print(json.dumps(r) if a.json else
      f"tokens/s: none {r['none_tokens_per_s']:.0f}, sharded {r['sharded_tokens_per_s']:.0f} "
      f"({r['sharded_over_none']:.3f}), file {r['file_tokens_per_s']:.0f} "
      f"({r['file_over_none']:.3f}), a checkpoint every {a.every} of {a.iters} iterations")
