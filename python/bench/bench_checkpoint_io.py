#!/usr/bin/env python3
"""Save and restore throughput of sharded checkpoints against the disk's own
rate, measured in the same run on the same folder.

    PYTHONPATH=build/release/python python3 python/bench/bench_checkpoint_io.py \\
        [--workers 4] [--gib 1] [--arrays 8] [--rounds 3] [--dir DIR] [--json]

A distributed cluster (`causeway cluster up`, one-device workers) holds
`--gib` GiB of float32 arrays, each sharded over every worker along its
first axis. Per round, interleaved:

  disk write  `dd` of as many bytes (random, from /dev/shm) into the
              checkpoint folder with oflag=direct and conv=fsync: one
              stream, and one per worker in parallel (on a folder that
              takes no O_DIRECT, such as tmpfs, through the page cache);
  save        Checkpointer.save of every array, to its commit (each worker
              writing its shards, each file fsynced, the manifest last);
  disk read   `dd` of the file back with iflag=direct (one stream, and one
              per worker);
  restore     Checkpointer.restore of every array onto the same sharding,
              until every array is ready on its devices, after the
              checkpoint's files were dropped from the page cache
              (posix_fadvise DONTNEED), so that restore reads the disk as
              dd does.

Throughputs are GiB/s (2^30 bytes); ratios are against the faster of the
two dd figures of the same round. Medians over rounds.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from cluster_up import cluster_up

ROOT = pathlib.Path(__file__).resolve().parents[2]
try:
    import causeway as cw
except ImportError:
    sys.path.insert(0, str(ROOT / "build/release/python"))
    import causeway as cw

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--workers", type=int, default=4)
p.add_argument("--gib", type=float, default=1.0, help="GiB of arrays saved and restored")
p.add_argument("--arrays", type=int, default=8)
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--dir", default="", help="the disk to measure (default: a temporary folder)")
p.add_argument("--causeway", default=os.environ.get("CAUSEWAY_BIN",
                                                   str(ROOT / "build/release/bin/causeway")))
p.add_argument("--json", action="store_true")
a = p.parse_args()

GIB = 1 << 30
total = int(a.gib * GIB)
per_array = total // a.arrays
cols = per_array // 4 // a.workers  # float32 elements per row; one row per worker
if cols < 1024:
    raise SystemExit("--gib too small for --arrays and --workers")
nbytes = cols * 4 * a.workers * a.arrays


def dd(args):
    t = time.monotonic()
    subprocess.run(["dd", *args, "status=none"], check=True)
    return time.monotonic() - t


def dd_parallel(arg_lists):
    t = time.monotonic()
    procs = [subprocess.Popen(["dd", *args, "status=none"]) for args in arg_lists]
    for proc in procs:
        if proc.wait() != 0:
            raise SystemExit("dd failed")
    return time.monotonic() - t


def drop_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def drop_cache(folder):
    for dirpath, _, files in os.walk(folder):
        for name in files:
            drop_file(os.path.join(dirpath, name))


def takes_direct(folder):
    probe = folder / "direct_probe"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600))
        return True
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)


def main():
    base = pathlib.Path(tempfile.mkdtemp(prefix="cw_ckpt_io_", dir=a.dir or None))
    shm = pathlib.Path(tempfile.mkdtemp(prefix="cw_ckpt_io_", dir="/dev/shm"))
    try:
        with cluster_up(a.causeway, base, a.workers,
                        ["--memory", str(3 * nbytes // a.workers + (64 << 20))]) as cluster:
            measure(cluster, shm)
    finally:
        subprocess.run(["rm", "-rf", str(base), str(shm)], check=False)


def measure(cluster, shm):
    base, root, info = cluster.root.parent, cluster.root, cluster.info
    client = cw.connect(info["address"], info["token"])
    mesh = cw.make_mesh({"data": a.workers}, client=client)
    sharding = cw.NamedSharding(mesh, cw.P("data"))
    rng = np.random.default_rng(0)
    arrays = {}
    for i in range(a.arrays):
        host = rng.standard_normal((a.workers, cols), dtype=np.float32)
        arrays[f"w{i}"] = cw.device_put(host, sharding).block_until_ready()
    # dd's source: random bytes in memory, one file per stream.
    chunk = 16 << 20
    per_stream = nbytes // a.workers // chunk * chunk
    sources = []
    for w in range(a.workers):
        src = shm / f"src{w}"
        with open(src, "wb") as f:
            for _ in range(per_stream // chunk):
                f.write(rng.bytes(chunk))
        sources.append(src)
    one = shm / "src_all"
    with open(one, "wb") as f:
        for src in sources:
            f.write(src.read_bytes())
    dd_bytes = per_stream * a.workers
    # A folder on tmpfs takes no O_DIRECT: dd then goes through the page
    # cache, its files dropped from it before they are read, as the
    # checkpoint's are.
    direct = takes_direct(base)
    wflags = ["oflag=direct", "conv=fsync"] if direct else ["conv=fsync"]
    rflags = ["iflag=direct"] if direct else []

    ckpt = cw.Checkpointer(str(root / "run"), client=client, keep=1)
    rows = []
    for r in range(a.rounds):
        row = {}
        out = base / "dd_one"
        row["dd_write_1"] = dd_bytes / GIB / dd(
            [f"if={one}", f"of={out}", f"bs={chunk}", *wflags])
        outs = [base / f"dd_{w}" for w in range(a.workers)]
        row["dd_write_n"] = dd_bytes / GIB / dd_parallel(
            [[f"if={sources[w]}", f"of={outs[w]}", f"bs={chunk}", *wflags]
             for w in range(a.workers)])

        step = r + 1
        t = time.monotonic()
        ckpt.save(step, arrays).wait()
        row["save"] = nbytes / GIB / (time.monotonic() - t)

        for path in [out, *outs]:
            drop_file(path)
        row["dd_read_1"] = dd_bytes / GIB / dd(
            [f"if={out}", "of=/dev/null", f"bs={chunk}", *rflags])
        row["dd_read_n"] = dd_bytes / GIB / dd_parallel(
            [[f"if={outs[w]}", "of=/dev/null", f"bs={chunk}", *rflags]
             for w in range(a.workers)])
        for path in [out, *outs]:
            path.unlink()

        drop_cache(root / "run")
        t = time.monotonic()
        back = ckpt.restore(step, {name: sharding for name in arrays})
        for x in back.values():
            x.block_until_ready()
        row["restore"] = nbytes / GIB / (time.monotonic() - t)
        if r == 0:  # the bytes came back
            for name in list(arrays)[:2]:
                if not np.array_equal(np.asarray(back[name]), np.asarray(arrays[name])):
                    raise SystemExit(f"restored {name} differs from what was saved")
        del back
        row["save_ratio"] = row["save"] / max(row["dd_write_1"], row["dd_write_n"])
        row["restore_ratio"] = row["restore"] / max(row["dd_read_1"], row["dd_read_n"])
        rows.append(row)
        if not a.json:
            print(f"round {r}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()),
                  flush=True)
    med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
    result = {"workers": a.workers, "bytes": nbytes, "arrays": a.arrays, "direct": direct,
              "rounds": a.rounds, "files_per_save": a.arrays * a.workers,
              "median_gib_s": med, "rounds_gib_s": rows}
    if a.json:
        print(json.dumps(result))
    else:
        print(f"{nbytes / GIB:.2f} GiB in {a.arrays} arrays over {a.workers} workers, "
              f"medians of {a.rounds} rounds (GiB/s; dd "
              f"{'with O_DIRECT' if direct else 'through the page cache'}):")
        print(f"  write: dd 1 stream {med['dd_write_1']:.3f}, dd {a.workers} streams "
              f"{med['dd_write_n']:.3f}, save {med['save']:.3f} "
              f"({med['save_ratio']:.2f} of dd)")
        print(f"  read:  dd 1 stream {med['dd_read_1']:.3f}, dd {a.workers} streams "
              f"{med['dd_read_n']:.3f}, restore {med['restore']:.3f} "
              f"({med['restore_ratio']:.2f} of dd)")


main()
