"""Threads, Ctrl-C, a distributed cluster, the README and the examples."""
import concurrent.futures
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import causeway as cw

SOURCE = pathlib.Path(os.environ.get("CAUSEWAY_SOURCE_DIR",
                                     pathlib.Path(__file__).resolve().parents[2]))
CHILD_ENV = dict(os.environ)


def test_several_threads_share_one_client(client):
    mesh = cw.make_mesh({"data": 4}, client=client)
    s = cw.NamedSharding(mesh, cw.P("data"))
    f = cw.compile(lambda x, k: x * k, in_shardings=[s, cw.NamedSharding(mesh, cw.P())],
                   out_shardings=s)

    def work(t):
        x = cw.device_put(np.full(8, t, np.float32), s)
        for k in range(20):
            x = f(x, np.float32(1.0))
        return float(np.asarray(x)[0])

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert list(pool.map(work, range(16))) == [float(t) for t in range(16)]


def test_ctrl_c_interrupts_a_blocking_fetch_promptly(tmp_path):
    script = tmp_path / "block.py"
    script.write_text(
        "import sys, time, os, numpy as np, causeway as cw\n"
        "c = cw.local_cluster(islands=1, hosts_per_island=1, devices_per_host=1)\n"
        "m = cw.make_mesh({'x': 1})\n"
        "s = cw.NamedSharding(m, cw.P())\n"
        "slow = cw.compile(lambda x: cw.delay(x, 60_000_000), in_shardings=s)\n"
        "y = slow(np.zeros(2, np.float32))\n"
        "t = time.monotonic()\n"
        "try:\n"
        "    print('waiting', flush=True)\n"
        "    np.asarray(y)\n"
        "    print('finished', flush=True)\n"
        "except KeyboardInterrupt:\n"
        "    print(f'interrupted {time.monotonic() - t:.3f}', flush=True)\n"
        "os._exit(0)\n")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                         env=CHILD_ENV)
    try:
        assert p.stdout.readline().strip() == "waiting"
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        line = p.stdout.readline().strip()
        answered = time.monotonic() - sent
    finally:
        p.kill()
        p.wait()
    assert line.startswith("interrupted"), line
    assert answered < 5.0  # the wait is sliced at 50 ms; the delay had a minute to go


def test_interpreter_exit_cancels_queued_work(tmp_path):
    # Twenty queued runs of 0.5 s: 10 s to run them all. At exit the one
    # running finishes and the rest fail unrun.
    script = tmp_path / "queued.py"
    script.write_text(
        "import numpy as np, causeway as cw\n"
        "c = cw.local_cluster(islands=1, hosts_per_island=1, devices_per_host=1)\n"
        "m = cw.make_mesh({'x': 1})\n"
        "s = cw.NamedSharding(m, cw.P())\n"
        "slow = cw.compile(lambda x: cw.delay(x, 500_000), in_shardings=s)\n"
        "x = cw.device_put(np.zeros(2, np.float32), s)\n"
        "ys = [slow(x) for _ in range(20)]\n"
        "print('queued', flush=True)\n")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                         env=CHILD_ENV)
    try:
        assert p.stdout.readline().strip() == "queued"
        queued = time.monotonic()
        p.wait(timeout=60)
        took = time.monotonic() - queued
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 0
    assert took < 3.0, took


def test_a_bounded_wait_raises_a_timeout(mesh):
    slow = cw.compile(lambda x: cw.delay(x, 5_000_000), in_shardings=cw.NamedSharding(mesh, cw.P()))
    y = slow(np.zeros(2, np.float32))
    with pytest.raises(cw.DeadlineExceededError):
        y.fetch(timeout=0.05)
    with pytest.raises(TimeoutError):
        y.block_until_ready(timeout=0.05)


def _causeway_bin():
    path = os.environ.get("CAUSEWAY_BIN")
    if not path:
        pytest.skip("CAUSEWAY_BIN is not set (ctest sets it)")
    return path


def test_a_distributed_cluster_from_python(tmp_path, monkeypatch):
    binary = _causeway_bin()
    # The token record goes to a directory of this test's own (and other
    # tests' commands do not find this cluster).
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    up = subprocess.Popen([binary, "cluster", "up", "--islands", "1", "--hosts-per-island", "2",
                           "--devices-per-host", "2", "--json"], stdout=subprocess.PIPE,
                          text=True, env=dict(os.environ))
    try:
        info = json.loads(up.stdout.readline())
        # Without an address or token: the cluster `cluster up` runs.
        recorded = cw.connect(timeout=30)
        assert len(recorded.devices()) == 4
        recorded.disconnect()
        c = cw.connect(info["address"], token=info["token"], timeout=30)
        assert c.kind == "remote"
        assert len(c.devices()) == 4
        m = cw.make_mesh({"data": 4}, client=c)
        s = cw.NamedSharding(m, cw.P("data"))
        f = cw.compile(lambda x: cw.all_reduce(x.sum(), "data"), in_shardings=s,
                       out_shardings=cw.NamedSharding(m, cw.P()))
        assert float(np.asarray(f(np.arange(8, dtype=np.float32)))) == 28.0
        # Control flow travels to the workers with its sub-functions and runs
        # there: each device doubles its shard's sum until it passes 100.
        g = cw.compile(lambda x: cw.while_loop(lambda v: v.sum() < 100.0, lambda v: v * 2.0,
                                               x.sum(keepdims=True)),
                       in_shardings=s, out_shardings=s)
        np.testing.assert_array_equal(np.asarray(g(np.arange(8, dtype=np.float32))),
                                      [128.0, 160.0, 144.0, 104.0])
        with pytest.raises(cw.UnimplementedError):
            c.device_memory_in_use()
        c.disconnect()
        with pytest.raises(cw.PermissionDeniedError):
            cw.connect(info["address"], token="not-the-token", timeout=10)
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=60)


def test_a_device_kind_this_build_lacks_is_named():
    with pytest.raises(cw.NotFoundError, match=r'"abacus".*cpu'):
        cw.local_cluster(1, 1, 1, device_kind="abacus")
    c = cw.local_cluster(1, 1, 2, device_kind="cpu")
    assert [d.kind for d in cw.devices(c)] == ["cpu", "cpu"]


def test_a_function_runs_on_vulkan_devices():
    # The vulkan kind where this build has it (lavapipe runs it on the CPU).
    try:
        c = cw.local_cluster(1, 1, 2, device_kind="vulkan")
    except cw.NotFoundError:
        pytest.skip("this build has no vulkan kind")
    assert [d.kind for d in cw.devices(c)] == ["vulkan", "vulkan"]
    mesh = cw.make_mesh({"data": 2}, client=c)
    rows = cw.NamedSharding(mesh, cw.P("data"))
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    f = cw.compile(lambda a: (a * 2.0).sum(axis=1), in_shardings=rows, out_shardings=rows)
    np.testing.assert_allclose(np.asarray(f(x)), (x * 2.0).sum(axis=1))
    total = cw.compile(lambda a: cw.all_reduce(a.sum(), "data"), in_shardings=rows)
    assert float(np.asarray(total(x))) == 66.0
    c.disconnect()


def test_connecting_nowhere_fails_within_the_timeout():
    t = time.monotonic()
    with pytest.raises(cw.CausewayError):
        cw.connect("grpc://127.0.0.1:1", token="x", timeout=1)
    assert time.monotonic() - t < 10


def test_the_readme_python_example_runs():
    text = (SOURCE / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README.md has no python example"
    out = subprocess.run([sys.executable, "-c", blocks[0]], capture_output=True, text=True,
                         env=CHILD_ENV, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "32." in out.stdout


def test_the_training_example_learns(tmp_path):
    corpus = tmp_path / "text.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    out = subprocess.run(
        [sys.executable, str(SOURCE / "examples/python/train_lm.py"), "--data", str(corpus),
         "--iters", "60", "--layers", "1", "--embed", "32", "--heads", "2", "--context", "16",
         "--batch", "8", "--log-every", "20", "--json"],
        capture_output=True, text=True, env=CHILD_ENV, timeout=240)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["iters"] == 60
    assert summary["final_val_loss"] < summary["initial_loss"] - 0.5
    assert summary["tokens_per_second"] > 0


def test_the_cpp_trainer_from_python_matches_the_python_loop():
    text = "to be or not to be, that is the question. " * 300
    data = cw.models.TextDataset.from_text(text, "chars", 16)
    config = {"context": 16, "layers": 1, "heads": 2, "embed": 32}
    c = cw.local_cluster(islands=1, hosts_per_island=1, devices_per_host=1)
    losses = []
    cw.models.train_lm(c, data, config, batch=4, iters=5, warmup_iters=2, decay_iters=5,
                       eval_every=0, on_step=lambda it, loss, gn, lr: losses.append(loss))
    assert len(losses) == 5
    # The same steps driven from Python: the same losses.
    cfg = dict(config, vocab=data.vocab_size)
    model = cw.models.GPT(cfg, cw.make_mesh({"data": 1, "model": 1}, client=c), batch=4)
    mine = []
    for it in range(5):
        x, y = data.sample("train", 1, 0, it, 4, 16)
        lr = cw.models.learning_rate(it, 1e-3, 1e-4, 2, 5)
        loss, _ = model.step(x, y, it, lr)
        mine.append(float(np.asarray(loss)))
    np.testing.assert_allclose(mine, losses, rtol=1e-5)
    c.disconnect()


def test_gpt_checkpoints_save_load_resume_and_sample(tmp_path):
    text = "to be or not to be, that is the question. " * 300
    data = cw.models.TextDataset.from_text(text, "chars", 16)
    cfg = {"context": 16, "layers": 1, "heads": 2, "embed": 32, "vocab": data.vocab_size}
    c = cw.local_cluster(islands=1, hosts_per_island=1, devices_per_host=1)
    mesh = cw.make_mesh({"data": 1, "model": 1}, client=c)
    batches = [data.sample("train", 1, 0, it, 4, 16) for it in range(5)]
    lrs = [cw.models.learning_rate(it, 1e-3, 1e-4, 2, 5) for it in range(5)]

    model = cw.models.GPT(cfg, mesh, batch=4)
    for it in range(3):
        model.step(*batches[it], it, lrs[it])
    path = model.save(str(tmp_path / "ckpt"), data, 3)
    assert path.endswith("model.safetensors")
    straight = [float(np.asarray(model.step(*batches[it], it, lrs[it])[0])) for it in (3, 4)]

    ckpt = cw.models.load_checkpoint(str(tmp_path / "ckpt"))
    assert ckpt.iteration == 3 and ckpt.vocab_size == data.vocab_size
    assert {k: v for k, v in ckpt.config.items() if k != "vocab"} == \
        {"context": 16, "layers": 1, "heads": 2, "embed": 32, "bias": True}
    assert len(ckpt.params) == len(model.specs) and len(ckpt.adam_m) == len(model.specs)
    # Resumed from the file, the next steps give the losses of the run that went on.
    resumed = cw.models.GPT.from_checkpoint(path, mesh, batch=4)
    again = [float(np.asarray(resumed.step(*batches[it], it, lrs[it])[0])) for it in (3, 4)]
    np.testing.assert_allclose(again, straight, rtol=1e-6)

    # Sampling from Python and from the command line give the same text.
    sample = cw.models.sample(ckpt, prompt="to be", tokens=40, seed=7)
    assert sample.startswith("to be") and len(sample) == 45
    assert cw.models.sample(path, prompt="to be", tokens=40, seed=7) == sample
    cli = subprocess.run([_causeway_bin(), "sample", "--checkpoint", str(tmp_path / "ckpt"),
                          "--prompt", "to be", "--tokens", "40", "--seed", "7"],
                         capture_output=True, text=True, env=CHILD_ENV, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert sample in cli.stdout

    # Errors name what is wrong.
    with pytest.raises(cw.NotFoundError):
        cw.models.load_checkpoint(str(tmp_path / "absent"))
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(pathlib.Path(path).read_bytes()[:1000])
    with pytest.raises(cw.CausewayError, match="broken.safetensors"):
        cw.models.load_checkpoint(str(broken))
    with pytest.raises(cw.InvalidArgumentError, match="params: 1 arrays"):
        cw.models.write_checkpoint(str(tmp_path / "bad"), cfg, data, 0, [np.zeros(3, np.float32)])
    assert not (tmp_path / "bad").exists()  # refused before anything is written
    c.disconnect()


def test_the_cpp_trainer_shards_the_optimiser_or_not_with_the_same_losses():
    text = "to be or not to be, that is the question. " * 300
    data = cw.models.TextDataset.from_text(text, "chars", 16)
    config = {"context": 16, "layers": 1, "heads": 2, "embed": 32}
    runs = []
    for shard in (True, False):
        c = cw.local_cluster(islands=1, hosts_per_island=1, devices_per_host=2)
        losses = []
        cw.models.train_lm(c, data, config, data_axis=2, batch=4, iters=5, warmup_iters=2,
                           decay_iters=5, eval_every=0, shard_optimizer=shard,
                           on_step=lambda it, loss, gn, lr: losses.append(loss))
        c.disconnect()
        runs.append(losses)
    assert len(runs[0]) == 5
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-5)


def test_pip_installs_the_package_offline(tmp_path):
    build_dir = os.environ.get("CAUSEWAY_BUILD_DIR")
    if not build_dir:
        pytest.skip("CAUSEWAY_BUILD_DIR is not set (ctest sets it)")
    # A virtual environment that sees Debian's numpy, setuptools and pybind11.
    venv = tmp_path / "venv"
    env = dict(os.environ, CAUSEWAY_BUILD_DIR=build_dir, PIP_NO_INDEX="1")
    env.pop("PYTHONPATH", None)
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    python = str(venv / "bin" / "python")
    out = subprocess.run([python, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                          str(SOURCE)], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, env=env, timeout=60).stdout.strip()
    target = pathlib.Path(site)
    assert (target / "causeway" / "_causeway.pyi").exists()
    run = subprocess.run(
        [python, "-c",
         "import numpy as np, causeway as cw; print(cw.__file__);"
         "cw.local_cluster(islands=1, hosts_per_island=1, devices_per_host=2);"
         "s = cw.NamedSharding(cw.make_mesh({'d': 2}), cw.P('d'));"
         "print(float(np.asarray(cw.compile(lambda x: cw.all_reduce(x.sum(), 'd'),"
         " in_shardings=s, out_shardings=cw.NamedSharding(s.mesh, cw.P()))(np.ones(4)))))"],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0].startswith(str(target))
    assert run.stdout.splitlines()[1] == "4.0"
