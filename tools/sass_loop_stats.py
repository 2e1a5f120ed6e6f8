#!/usr/bin/env python3
"""Main-loop instruction counts of the GEMM kernels, from cuobjdump's SASS.

The decode kernels spend most of their time issuing instructions (docs/PERF.md, change 87), so what a change
does to their main loops is worth knowing before it is timed. For each kernel whose mangled name contains the
pattern, this takes the loop of the largest backward branch and prints its instructions, its MMAs (HMMA, HGMMA),
the register moves in it (MOV, IMAD.MOV: ptxas's copies between register buffers) and instructions per
chunk-tile (one 16-row weight tile times one 64-K chunk: 4 HMMAs of m16n8k16 per token tile).

Usage: tools/sass_loop_stats.py <binary, library, object or cubin> [name pattern] [--cuobjdump PATH]
"""
import argparse
import re
from collections import Counter

from sass_util import opcode, read_kernels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("pattern", nargs="?", default="gemm_kernel")
    ap.add_argument("--cuobjdump", default="cuobjdump")
    a = ap.parse_args()
    for (arch, name), ins in sorted(read_kernels(a.path, a.cuobjdump).items()):
        if a.pattern not in name:
            continue
        loop = None  # (target, branch address) of the backward branch spanning the most code
        for addr, text in ins:
            m = re.search(r"\bBRA (0x[0-9a-f]+)", text)
            if m and int(m.group(1), 16) < addr and (loop is None or addr - int(m.group(1), 16) > loop[1] - loop[0]):
                loop = (int(m.group(1), 16), addr)
        if loop is None:
            continue
        ops = Counter(opcode(text) for addr, text in ins if loop[0] <= addr <= loop[1])
        total = sum(ops.values())
        mma = sum(v for k, v in ops.items() if k.startswith(("HMMA", "HGMMA")))
        moves = sum(v for k, v in ops.items() if k == "MOV" or k.startswith("IMAD.MOV"))
        m = re.search(r"\d+([a-z_]+_kernel)I(\w*?)E+vNS", name)
        short = f"{m.group(1)}<{m.group(2)}>" if m else name
        print(f"{arch} {short}: loop {total} instructions, {mma} MMA, {moves} moves ({100.0 * moves / total:.1f}%)"
              + (f", {4.0 * total / mma:.1f} per 4 MMAs" if mma else ""))


if __name__ == "__main__":
    main()
