#!/usr/bin/env python3
"""Whether each decode kernel requests its first weights before its grid-dependency wait.

The decode kernel loads its first stage of weights, then waits for the previous kernel (griddepcontrol.wait,
ACQBULK in SASS), so that a programmatically launched grid streams weights while the previous one finishes.
The compiler is free to schedule those loads after the wait, and did in 10 of 20 bf16 variants until the wait
was put in a branch (docs/PERF.md, change 44). This reads cuobjdump's SASS and prints, per fused_gemm_kernel
variant, how many 16-byte weight loads (LDG.E.NA.128) come before the wait of the path that computes (the last
ACQBULK before the first HMMA); 0 means the prefetch is gone.

Usage: tools/sass_first_loads.py <binary, library or cubin> [cuobjdump]    (exit 1 if any variant has 0)
"""
import re
import sys

from sass_util import read_kernels


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    tool = sys.argv[2] if len(sys.argv) > 2 else "cuobjdump"
    kernels = {key: [text for _, text in ins] for key, ins in read_kernels(sys.argv[1], tool).items()}
    missing = 0
    for (arch, name), ops in sorted(kernels.items()):
        m = re.search(r"fused_gemm_kernelI(\w+?)Li(\d)ELi(\d)ELi(\d)ELb(\d)E", name)
        if not m:
            continue
        first_mma = next((i for i, o in enumerate(ops) if "HMMA" in o), len(ops))
        waits = [i for i, o in enumerate(ops[:first_mma]) if o.startswith("ACQBULK")]
        if not waits:  # below sm_90 the wait compiles to nothing
            continue
        wait = waits[-1]
        loads = sum(1 for o in ops[:wait] if "LDG.E.NA.128" in o)
        dtype = "bf16" if "bfloat16" in m.group(1) else "f16"
        print(f"{arch} {dtype} mode {m.group(2)} nt {m.group(3)} nw {m.group(4)} light {m.group(5)}: "
              f"{loads} weight loads before the wait")
        missing += loads == 0
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
