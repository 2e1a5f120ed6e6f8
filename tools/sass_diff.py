#!/usr/bin/env python3
"""Which kernels of two builds differ in their SASS, instruction by instruction.

A change meant for some kernels can move the code of others (register allocation, scheduling, placement:
docs/PERF.md, changes 43 and 62), so before timing two builds against each other this says which kernels are
the same code in both. Addresses, immediates and the anonymous-namespace hash in the names are ignored;
--drop REGEX leaves out the second build's kernels whose name matches (new variants), --rename REGEX REPL
maps the second build's names onto the first's (a template parameter added with a default).

Usage: tools/sass_diff.py BASE NEW [--drop REGEX] [--rename REGEX REPL] [--cuobjdump PATH]
Prints one line per kernel that differs or exists on one side only, then a count; exit 0 either way.
"""
import argparse
import re

from sass_util import read_kernels


def kernels(path, tool):
    out = {}
    for (_, name), ins in read_kernels(path, tool).items():
        name = re.sub(r"_GLOBAL__N__[0-9a-f]+_\d+_\w+?_[0-9a-f]{8}", "", name)
        out[name] = [re.sub(r"0x[0-9a-f]+", "X", text) for _, text in ins]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--drop")
    ap.add_argument("--rename", nargs=2)
    ap.add_argument("--cuobjdump", default="cuobjdump")
    a = ap.parse_args()
    base, new = kernels(a.base, a.cuobjdump), {}
    for k, v in kernels(a.new, a.cuobjdump).items():
        if a.drop and re.search(a.drop, k):
            continue
        new[re.sub(a.rename[0], a.rename[1], k) if a.rename else k] = v
    same = 0
    for k in sorted(set(base) | set(new)):
        if k not in new or k not in base:
            print(("only in base: " if k in base else "only in new: ") + k)
        elif base[k] != new[k]:
            changed = sum(x != y for x, y in zip(base[k], new[k])) + abs(len(base[k]) - len(new[k]))
            print(f"differs: {k} ({len(base[k])} -> {len(new[k])} instructions, {changed} positions)")
        else:
            same += 1
    print(f"{same} of {len(base)} base kernels identical")


if __name__ == "__main__":
    main()
