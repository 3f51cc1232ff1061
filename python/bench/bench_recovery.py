#!/usr/bin/env python3
"""Time from a worker's death to training again, for `causeway train lm
--elastic` on a distributed cluster (`causeway cluster up`, one-device
workers on this machine), split into its parts.

    python3 python/bench/bench_recovery.py --data tinyshakespeare.txt \\
        [--workers 2] [--kill-at 60] [--iters 150] [--rounds 2] [--json]

Each round runs two recoveries of its own cluster and training run:
`replace` (a worker killed with -9 and started again by `cluster up
--restart-workers`, as a supervisor would) and `shrink` (killed, none started; --replace-timeout 0:
the data axis shrinks). For each, from the trainer's recovery event and
this script's clock:

  detection  the kill to the trainer's error (the runtime noticing);
  wait       the error to the next attempt: the loss confirmed in the
             topology, and the wait for the replacement to join;
  restore    the next attempt to its state restored: a new client, mesh,
             compiled step, the checkpoint read back onto the new mesh;
  first step the state restored to the first step's loss after it;
  total      the kill to that first loss: the time to training again.

The same script is a test (tests/integration, with a small corpus): it
fails unless every run completes with exactly one recovery.
"""
import argparse
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from cluster_up import cluster_up

ROOT = pathlib.Path(__file__).resolve().parents[2]
p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--data", required=True)
p.add_argument("--workers", type=int, default=2)
p.add_argument("--kill-at", type=int, default=60, help="iteration whose loss triggers the kill")
p.add_argument("--iters", type=int, default=150)
p.add_argument("--every", type=int, default=25, help="checkpoint interval")
p.add_argument("--rounds", type=int, default=2)
p.add_argument("--model", default="", help="extra train lm flags, e.g. '--layers 2 --embed 64'")
p.add_argument("--causeway", default=str(ROOT / "build/release/bin/causeway"))
p.add_argument("--timeout", type=float, default=600, help="seconds one run may take")
p.add_argument("--json", action="store_true")
a = p.parse_args()


def read_json_line(stream, deadline, what, proc=None):
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            err = proc.stderr.read()[-3000:] if proc is not None else ""
            raise SystemExit(f"{what}: output ended {err} (logs: {LOGS})")
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"{what}: nothing within the deadline")


def run_one(mode, workdir):
    extra = ["--restart-workers"] if mode == "replace" else []
    with cluster_up(a.causeway, workdir, a.workers, extra, a.timeout) as cluster:
        deadline = time.monotonic() + a.timeout
        global LOGS
        LOGS = cluster.info["log_dir"]
        cmd = [a.causeway, "train", "lm", "--cluster", cluster.info["address"], "--elastic",
               "--data", a.data, "--mesh", f"data={a.workers}", "--iters", str(a.iters),
               "--checkpoint", str(cluster.root / "run"), "--checkpoint-every", str(a.every),
               "--checkpoint-format", "sharded", "--eval-every", "0", "--log-every", "1",
               "--replace-timeout", "60" if mode == "replace" else "0", "--json"]
        cmd += a.model.split()
        trainer = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=cluster.env)
        try:
            return watch(mode, cluster.proc, trainer, deadline)
        finally:
            if trainer.poll() is None:
                trainer.kill()
                trainer.wait()


def watch(mode, up, trainer, deadline):
    """Kills a worker at --kill-at and times the recovery from the trainer's events."""
    killed = None
    event = None
    restored_at = None
    first_after = None
    summary = None
    while True:
        e = read_json_line(trainer.stdout, deadline, "train lm", trainer)
        now = time.time()
        kind = e["event"]
        if kind == "step" and killed is None and e["iteration"] >= a.kill_at:
            # A worker of the mesh (every worker is in it).
            workers = subprocess.run(["pgrep", "-P", str(up.pid), "-f", "causeway worker"],
                                     capture_output=True, text=True).stdout.split()
            victim = int(workers[-1])
            os.kill(victim, signal.SIGKILL)
            killed = time.time()
        elif kind == "recovery":
            event = e
            restored_at = now
        elif kind == "step" and event is not None and first_after is None:
            first_after = now
        elif kind == "summary":
            summary = e
            break
    rc = trainer.wait(timeout=60)
    if rc != 0 or event is None or summary is None or summary["recoveries"] != 1:
        raise SystemExit(f"{mode}: exit {rc}, recovery {event}, summary {summary}: "
                         f"{trainer.stderr.read()[-2000:]}")
    detection = event["failed_at_unix_s"] - killed
    return {
        "mode": mode,
        "detection_s": detection,
        "wait_s": event["wait_s"],
        "restore_s": event["restore_s"],
        "first_step_s": first_after - restored_at,
        "total_s": first_after - killed,
        "devices_after": event["devices_after"],
        "steps_repeated": event["steps_repeated"],
    }


LOGS = ""
results = {"replace": [], "shrink": []}
for _ in range(a.rounds):
    for mode in results:
        with tempfile.TemporaryDirectory() as d:
            results[mode].append(run_one(mode, pathlib.Path(d)))

parts = ["detection_s", "wait_s", "restore_s", "first_step_s", "total_s"]
summary = {m: {k: statistics.median(r[k] for r in rs) for k in parts} for m, rs in results.items()}
if a.json:
    print(json.dumps({"runs": results, "median": summary}))
else:
    print(f"{'':8}" + "".join(f"{k[:-2]:>12}" for k in parts) + "   (seconds, median of "
          f"{a.rounds})")
    for m, s in summary.items():
        print(f"{m:8}" + "".join(f"{s[k]:12.3f}" for k in parts))
    for m, rs in results.items():
        print(f"{m}: devices after {rs[0]['devices_after']}, steps repeated "
              f"{[r['steps_repeated'] for r in rs]}")
sys.exit(0)
