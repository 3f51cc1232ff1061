#!/usr/bin/env python3
"""Prints the headers a user of Causeway's public API needs: the public
headers and every causeway header they include, transitively, one path per
line (relative to the repository root). CMake installs exactly these.

    scripts/public_headers.py ROOT HEADER...

A header that is not in the source tree (a generated one) is an error: the
public API must not expose generated code.
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"(causeway/[^"]+)"', re.M)


def main():
    root = pathlib.Path(sys.argv[1])
    todo = list(sys.argv[2:])
    seen = set()
    while todo:
        h = todo.pop()
        if h in seen:
            continue
        path = root / h
        if not path.exists():
            sys.exit(f"public_headers.py: {h} (included by the public API) is not in the source tree")
        seen.add(h)
        todo.extend(INCLUDE.findall(path.read_text()))
    print("\n".join(sorted(seen)))


if __name__ == "__main__":
    main()
