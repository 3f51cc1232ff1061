#!/usr/bin/env python3
"""Writes the README's C++ example as a program, for the readme_example test.

The ```cpp blocks of README.md are taken verbatim, in order: their #include
and `using` lines go at the top of the file, the rest into main(), followed
by a check of the result the README promises (`v`: 16 values, each 32).

    readme_example.py README.md OUT.cc
"""
import sys


def main():
    readme, out = sys.argv[1], sys.argv[2]
    lines = open(readme, encoding="utf-8").read().splitlines()
    block = []
    start = 0
    while "```cpp" in lines[start:]:
        start = lines.index("```cpp", start) + 1
        end = lines.index("```", start)
        block += lines[start:end]
        start = end + 1
    if not block:
        sys.exit(f"{readme}: no ```cpp block")
    head = [l for l in block if l.startswith("#include") or l.startswith("using ")]
    body = [l for l in block if l not in head]
    text = [
        "// Generated from README.md by scripts/readme_example.py: do not edit.",
        "#include <cstdio>",
        *head,
        "",
        "int main() {",
        *["  " + l if l else "" for l in body],
        "  // What the README says the example computes.",
        "  if (!v.ok()) {",
        '    std::fprintf(stderr, "readme example: %s\\n", v.status().ToString().c_str());',
        "    return 1;",
        "  }",
        "  if (v->values<float>().size() != 16) return 1;",
        "  for (float x : v->values<float>()) {",
        "    if (x != 32.0f) return 1;",
        "  }",
        '  std::printf("readme example: 16 values of 32\\n");',
        "  return 0;",
        "}",
    ]
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(text) + "\n")


if __name__ == "__main__":
    main()
