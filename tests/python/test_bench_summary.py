#!/usr/bin/env python3
"""tools/bench_summary.py on hand-made bench_gemm and bench_stream outputs whose answers are worked out here.

Layer 4096×4096 is 9.437184 MB of NVFP4 (0.5625 B per weight); 57344×8192 264.241152 MB. Two bench runs:
  4096×4096  M = 1  w4a16 5.0 / 4.0 µs (fastest 4.0; the H200 target 2 x 9.437 / 4.2 = 4.49 µs: met), w4a4 4.8
             (/ 4.0 = 1.20x: at the 1.2x line, met),
             M = 16 w4a16 4.6 (/ 4.0 = 1.15x: over 1.1x), w4a4 5.6 (/ 4.6 = 1.22x: over 1.2x),
             M = 64 w4a16 6.0 against cuBLAS 12.6 (2.10x: met); a forced split row at 1.0 µs (must be ignored)
  57344×8192 M = 1  w4a16 75.5 (the H200 target is 264.241152 / 3.5 = 75.497 µs: missed by 0.003, printed as
             75.5), M = 16 83.0 (1.0993x: met), M = 64 130.0 against 200.0 (1.54x: not met).
bench_stream: 9.4 MB best of 4.3 and 4.2 -> 4.2 µs, so 4096×4096 M = 1 takes 4.0 / 4.2 = 0.95x the ceiling.
A third file with a FAIL row must make the tool exit 1 naming the layer.
argv (unused): nvfp4 binary, tests/data directory.
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "bench_summary.py")
HEAD = ("| N×K | M | semantics | µs | weight TB/s | TFLOP/s | cuBLAS bf16 µs | vs cuBLAS | vs Marlin | path | check |\n"
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|\n")


def row(layer, m, sem, us, cub, path="fused (nt1 nw1 wk8)", check="ok (0.10)"):
    return f"| {layer} | {m} | {sem} | {us} | 1.00 | 1.0 | {cub} | 1.00x | - | {path} | {check} |\n"


def run(args):
    return subprocess.run([sys.executable, TOOL] + args, capture_output=True, text=True)


def main():
    fails = []

    def expect(cond, what):
        if not cond:
            fails.append(what)

    with tempfile.TemporaryDirectory() as d:
        a, b, bad, st = (os.path.join(d, n) for n in ("a.md", "b.md", "bad.md", "stream.md"))
        with open(a, "w") as f:
            f.write("# bench_gemm\n\n" + HEAD)
            f.write(row("4096×4096", 1, "w4a16", 5.0, 13.0))
            f.write(row("4096×4096", 1, "w4a4", 4.8, 13.0))
            f.write(row("4096×4096", 16, "w4a16", 4.6, 13.1, "fused (nt2 nw1 wk12 light)"))
            f.write(row("4096×4096", 16, "w4a4", 5.6, 13.1))
            f.write(row("4096×4096", 64, "w4a16", 1.0, 12.0, "fused-s4"))
            f.write(row("57344×8192", 1, "w4a16", 75.5, 220.0))
            f.write(row("57344×8192", 16, "w4a16", 83.0, 221.0))
            f.write("\nall outputs within bound\n")
        with open(b, "w") as f:
            f.write(HEAD)
            f.write(row("4096×4096", 1, "w4a16", 4.0, 13.5))
            f.write(row("4096×4096", 64, "w4a16", 6.0, 12.6, "fused"))
            f.write(row("57344×8192", 64, "w4a16", 130.0, 200.0, "fused"))
        with open(bad, "w") as f:
            f.write(HEAD + row("4096×4096", 1, "w4a16", 3.0, 13.0, check="FAIL (1.70)"))
        with open(st, "w") as f:
            f.write("| MB | layout | blocks/SM or lines/warp | depth | programmatic | µs | TB/s |\n"
                    "|---:|---|---:|---:|---|---:|---:|\n"
                    "| 9.4 | even | 1 | 1 | no | 4.30 | 2.19 |\n| 9.4 | even | 2 | 2 | no | 4.20 | 2.24 |\n")

        r = run(["--stream", st, "--h200", a, b])
        expect(r.returncode == 0, f"exit {r.returncode}: {r.stderr}")
        lines = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[1:-1]]
                 for ln in r.stdout.splitlines() if ln.startswith("| ") and "×" in ln.split("|")[1]}
        small, large = lines.get("4096×4096"), lines.get("57344×8192")
        expect(small is not None and large is not None, "both layers have a row:\n" + r.stdout)
        if small and large:
            expect(small[1] == "9.4" and small[2] == "4.2", f"MB and ceiling: {small[1:3]}")
            expect(small[3] == "4.0-5.0 (1.89-2.36)", f"M = 1 range and TB/s: {small[3]}")
            expect(small[4] == "0.95x", f"x ceiling: {small[4]}")
            expect(small[5] == "4.5", f"H200 target of 4096x4096 (2 x 9.437 MB / 4.2 TB/s): {small[5]}")
            expect(small[6] == "13.0-13.5", f"cuBLAS at M = 1 over both runs: {small[6]}")
            expect(small[7] == "4.6 (1.15x)", f"M = 16: {small[7]}")
            expect(small[8] == "1.20x / 1.22x", f"w4a4 ratios: {small[8]}")
            expect(small[9] == "- / -", f"no vLLM rows: {small[9]}")
            expect(small[10] == "6.0 / 12.6 (2.10x)", f"M = 64, the forced split ignored: {small[10]}")
            expect(large[5] == "75.5", f"H200 target of 57344x8192: {large[5]}")
            expect(large[10] == "130.0 / 200.0 (1.54x)", f"M = 64 of the large layer: {large[10]}")
        out = r.stdout
        expect("- M = 1 at the H200 target: 1 of 2 (not: 57344×8192)" in out, "H200 M = 1 verdicts:\n" + out)
        expect("- M = 16 <= 1.1x M = 1: 1 of 2 (not: 4096×4096)" in out, "M = 16 verdicts:\n" + out)
        expect("- w4a4 at M = 1 <= 1.2x w4a16: 1 of 1\n" in out + "\n", "w4a4 at M = 1 at the line is met:\n" + out)
        expect("- w4a4 at M = 16 <= 1.2x w4a16: 0 of 1 (not: 4096×4096)" in out, "w4a4 at M = 16:\n" + out)
        expect("- M = 64 >= 2.0x cuBLAS bf16: 1 of 2 (not: 57344×8192)" in out, "M = 64 verdicts:\n" + out)

        r = run([a, b])
        expect(r.returncode == 0 and "H200" not in r.stdout, "without --h200 no H200 target is printed")

        r = run([a, bad])
        expect(r.returncode == 1 and "4096×4096" in r.stderr and "FAIL" in r.stderr and not r.stdout,
               f"a failed output is refused: exit {r.returncode}, stderr {r.stderr!r}, stdout {r.stdout!r}")
        r = run([os.path.join(d, "missing.md")])
        expect(r.returncode == 1 and "missing.md" in r.stderr, f"a missing file: {r.returncode} {r.stderr!r}")

    for f in fails:
        print("FAIL:", f)
    print("bench_summary:", "ok" if not fails else f"{len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
