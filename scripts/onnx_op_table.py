#!/usr/bin/env python3
"""Regenerates docs/ONNX.md's op table: every op of ONNX's default domain
(opset 17, from python3-onnx's schemas), whether the importer converts it
(the op tables of causeway/frontend/onnx/ops_*.cc), and the node tests it
makes, as onnx_conformance_test counts them.

    python3 scripts/onnx_op_table.py build/release/bin/onnx_conformance_test
"""
import pathlib
import re
import subprocess
import sys

import onnx.defs

ROOT = pathlib.Path(__file__).resolve().parent.parent


def converted():
    names = set()
    for f in (ROOT / "causeway/frontend/onnx").glob("ops_*.cc"):
        names.update(re.findall(r't\["(\w+)"\]\s*=', f.read_text()))
    return names


def counts(conformance):
    out = subprocess.run([conformance], capture_output=True, text=True, check=False).stdout
    node = out.split("pytorch-converted:")[0]
    table = {}
    for line in node.splitlines():
        m = re.match(r"^  (\w+)\s+(\d+)\s+(\d+)\s+(\d+)$", line)
        if m:
            table[m.group(1)] = tuple(int(g) for g in m.groups()[1:])
    if not table:
        sys.exit(f"{conformance} printed no per-op counts")
    return table


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    ops = sorted({s.name for s in onnx.defs.get_all_schemas_with_history()
                  if s.domain in ("", "ai.onnx") and s.since_version <= 17 and not s.deprecated})
    have, tests = converted(), counts(sys.argv[1])
    rows = ["| op | converted | node tests passed / failed / unsupported |", "|---|---|---|"]
    for op in ops:
        c = tests.get(op)
        rows.append(f"| {op} | {'yes' if op in have else 'no'} | "
                    f"{'' if c is None else ' / '.join(map(str, c))} |")
    doc = ROOT / "docs/ONNX.md"
    text = doc.read_text()
    start = text.index("| op | converted |")
    end = text.find("\n\n", start)
    end = len(text.rstrip("\n")) if end < 0 else end
    doc.write_text(text[:start] + "\n".join(rows) + text[end:].rstrip("\n") + "\n")


if __name__ == "__main__":
    main()
