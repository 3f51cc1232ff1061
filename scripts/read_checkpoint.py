#!/usr/bin/env python3
"""Reads a Causeway checkpoint without Causeway (docs/CHECKPOINT.md): numpy only.

  scripts/read_checkpoint.py ROOT_OR_STEP_FOLDER [--out FILE.npz]

ROOT is a folder of step-NNNNNNNN folders (the newest committed one is read) or
one such folder. Every piece is checked (a plain file name, a box inside its
array, its size and CRC-32, the pieces disjoint and covering the array); each
array is put together from its pieces and printed as name, dtype, shape and
sum, or all are written to FILE.npz. Any fault is one line naming it.
"""
import argparse
import json
import os
import re
import stat
import sys
import zlib

import numpy as np

DTYPES = {"f32": np.dtype("<f4"), "i32": np.dtype("<i4"), "pred": np.dtype("u1")}
PLAIN = re.compile(r"[A-Za-z0-9._-]{1,255}")


def fail(message):
    sys.exit(f"read_checkpoint: {message}")


def step_folder(path):
    if os.path.exists(os.path.join(path, "manifest.json")):
        return path
    try:
        names = os.listdir(path)
    except OSError as e:
        fail(f"cannot list {path}: {e.strerror}")
    steps = sorted(name for name in names
                   if re.fullmatch(r"step-\d{8}", name)
                   and os.path.exists(os.path.join(path, name, "manifest.json")))
    if not steps:
        fail(f"no committed checkpoint in {path}")
    return os.path.join(path, steps[-1])


def read_piece(folder, piece):
    name = piece["file"]
    if not PLAIN.fullmatch(name) or name in (".", "..", "manifest.json"):
        fail(f"a piece's file {name!r} is not a plain file name")
    path = os.path.join(folder, name)
    try:
        st = os.lstat(path)
    except OSError as e:
        fail(f"cannot open {path}: {e.strerror}")
    if not stat.S_ISREG(st.st_mode) or st.st_size != piece["bytes"]:
        fail(f"{path} is not a file of the {piece['bytes']} bytes its manifest gives")
    with open(path, "rb") as f:
        data = f.read(piece["bytes"] + 1)
    if len(data) != piece["bytes"]:
        fail(f"{path} changed while read")
    if zlib.crc32(data) != piece["crc32"]:
        fail(f"{path} does not match its checksum")
    return data


def read_array(folder, entry):
    name, shape = entry["name"], entry["shape"]
    if entry["dtype"] not in DTYPES:
        fail(f"array {name!r}: unknown dtype {entry['dtype']!r}")
    dtype = DTYPES[entry["dtype"]]
    out = np.zeros(shape, dtype=dtype)
    seen = np.zeros(shape, dtype=bool)
    for piece in entry["pieces"]:
        offset, extent = piece["offset"], piece["extent"]
        if len(offset) != len(shape) or len(extent) != len(shape) or any(
                o < 0 or e < 0 or o + e > d for o, e, d in zip(offset, extent, shape)):
            fail(f"array {name!r}: piece {piece['file']} is not a box inside {shape}")
        index = tuple(slice(o, o + e) for o, e in zip(offset, extent))
        if seen[index].any():
            fail(f"array {name!r}: piece {piece['file']} overlaps another")
        box = np.frombuffer(read_piece(folder, piece), dtype=dtype).reshape(extent)
        out[index] = box
        seen[index] = True
    if not seen.all():
        fail(f"array {name!r}: its pieces do not cover it")
    # pred: any non-zero byte is true.
    return out != 0 if entry["dtype"] == "pred" else out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--out", help="write every array to this .npz file")
    args = parser.parse_args()
    folder = step_folder(args.path)
    try:
        with open(os.path.join(folder, "manifest.json")) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read the manifest of {folder}: {e}")
    if (manifest.get("format") != "causeway-checkpoint" or manifest.get("version") != 1
            or manifest.get("byte_order") != "little" or manifest.get("layout") != "row-major"):
        fail(f"{folder} is not a little-endian, row-major causeway-checkpoint of version 1")
    try:
        arrays = {e["name"]: read_array(folder, e) for e in manifest["arrays"]}
    except (KeyError, TypeError) as e:
        fail(f"the manifest of {folder} lacks or mistypes a field: {e}")
    if args.out:
        np.savez(args.out, **arrays)
    print(f"step {manifest['step']}: {os.path.basename(folder)}")
    for name, a in arrays.items():
        print(f"{name} {a.dtype} {list(a.shape)} sum={a.sum().item()}")


if __name__ == "__main__":
    main()
