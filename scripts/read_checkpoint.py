#!/usr/bin/env python3
"""Reads a Causeway checkpoint without Causeway (docs/CHECKPOINT.md): numpy only.

  scripts/read_checkpoint.py ROOT_OR_STEP_FOLDER [--out FILE.npz]

ROOT is a folder of step-NNNNNNNN folders (the newest committed one is read) or
one such folder. Every piece's size and CRC-32 is checked; each array is put
together from its pieces and printed as name, dtype, shape and sum, or all are
written to FILE.npz.
"""
import argparse
import json
import os
import re
import sys
import zlib

import numpy as np

DTYPES = {"f32": np.dtype("<f4"), "i32": np.dtype("<i4"), "pred": np.dtype("u1")}


def step_folder(path):
    if os.path.exists(os.path.join(path, "manifest.json")):
        return path
    steps = sorted(name for name in os.listdir(path)
                   if re.fullmatch(r"step-\d{8}", name)
                   and os.path.exists(os.path.join(path, name, "manifest.json")))
    if not steps:
        sys.exit(f"read_checkpoint: no committed checkpoint in {path}")
    return os.path.join(path, steps[-1])


def read_array(folder, entry):
    dtype = DTYPES[entry["dtype"]]
    out = np.empty(entry["shape"], dtype=dtype)
    covered = 0
    for piece in entry["pieces"]:
        path = os.path.join(folder, piece["file"])
        with open(path, "rb") as f:
            data = f.read()
        if len(data) != piece["bytes"]:
            sys.exit(f"read_checkpoint: {path} is {len(data)} bytes, not {piece['bytes']}")
        if zlib.crc32(data) != piece["crc32"]:
            sys.exit(f"read_checkpoint: {path} does not match its checksum")
        box = np.frombuffer(data, dtype=dtype).reshape(piece["extent"])
        index = tuple(slice(o, o + e) for o, e in zip(piece["offset"], piece["extent"]))
        out[index] = box
        covered += box.size
    if covered != out.size:
        sys.exit(f"read_checkpoint: the pieces of {entry['name']} hold {covered} of {out.size}")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--out", help="write every array to this .npz file")
    args = parser.parse_args()
    folder = step_folder(args.path)
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    if manifest.get("format") != "causeway-checkpoint" or manifest.get("version") != 1:
        sys.exit(f"read_checkpoint: {folder} is not a causeway-checkpoint of version 1")
    arrays = {e["name"]: read_array(folder, e) for e in manifest["arrays"]}
    if args.out:
        np.savez(args.out, **arrays)
    print(f"step {manifest['step']}: {os.path.basename(folder)}")
    for name, a in arrays.items():
        print(f"{name} {a.dtype} {list(a.shape)} sum={a.sum().item()}")


if __name__ == "__main__":
    main()
