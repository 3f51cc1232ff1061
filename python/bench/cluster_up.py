"""`causeway cluster up` for the benchmark scripts: one-device workers on
this machine, each with a checkpoint root, a runtime folder of its own (so
its token record does not meet another cluster's), and a clean stop."""
import contextlib
import json
import os
import signal
import subprocess
import time


class Cluster:
    def __init__(self, proc, info, env, root):
        self.proc = proc  # cluster up; its workers are its children
        self.info = info  # its JSON line: address, token, log_dir, ...
        self.env = env    # for its clients: CAUSEWAY_TOKEN set
        self.root = root  # the workers' --checkpoint-root


@contextlib.contextmanager
def cluster_up(causeway, workdir, workers, extra=(), timeout=120):
    """Starts the cluster under `workdir` (a fresh folder) and yields a
    Cluster; stops it (SIGINT to the whole group) on the way out."""
    env = dict(os.environ)
    env["XDG_RUNTIME_DIR"] = str(workdir / "run")
    (workdir / "run").mkdir(mode=0o700)
    root = workdir / "ckpt"
    root.mkdir()
    proc = subprocess.Popen([causeway, "cluster", "up", "--islands", "1",
                             "--hosts-per-island", str(workers), "--devices-per-host", "1",
                             "--checkpoint-root", str(root), "--json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        info = None
        while info is None:
            line = proc.stdout.readline()
            if not line:
                raise SystemExit("cluster up: " + proc.stderr.read()[-3000:])
            if line.startswith("{"):
                info = json.loads(line)
            elif time.monotonic() > deadline:
                raise SystemExit("cluster up: no address within the deadline")
        env["CAUSEWAY_TOKEN"] = info["token"]
        yield Cluster(proc, info, env, root)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
