#!/usr/bin/env python3
"""The decode targets' table from bench_gemm and bench_stream output (docs/PERF.md's method).

Reads any number of bench_gemm markdown outputs (several runs of the same card: every number is given as the
range over the runs) and, optionally, bench_stream outputs (--stream; the best time per buffer size is the read
ceiling), and prints one markdown row per layer:
  MB (N·K·0.5625 bytes), the read ceiling, M = 1 w4a16 µs (TB/s) and its ratio to the ceiling, cuBLAS bf16 at
  M = 1, M = 16 w4a16 and M = 16 / M = 1, each W4A4 flavour over w4a16 at M = 1 and 16, M = 64 w4a16 and
  cuBLAS bf16 and the speed-up,
then which layers meet each target. Ratios are taken between the fastest run of each row. Only the default
rows count (path "fused", "fused (grid)" or "cublas"); forced grids, splits, rules and tiles are skipped.
A bench file with an output outside its bound ("FAIL") is refused: its times are not of a correct kernel.

Targets (docs/PERF.md): M = 1 within 3.5 TB/s of effective weight bandwidth on layers of 47 MB and more and
within 2x the byte floor (4.2 TB/s) on smaller ones: the H200's numbers, so they are printed only with
--h200 (other cards have other memories); M = 16 <= 1.1x M = 1; W4A4 at M <= 16 <= 1.2x w4a16; M = 64 >= 2x
faster than cuBLAS bf16: ratios, printed always.

Usage: tools/bench_summary.py [--stream STREAM.md]... [--h200] BENCH.md [BENCH.md ...]
"""
import argparse
import re
import sys
from collections import defaultdict

BYTES_PER_WEIGHT = 0.5625  # 4-bit code + one E4M3 scale per 16 weights
COPY_TBPS = 4.2            # the H200's copy ceiling (shared PERF.md)
LARGE_MB = 47.0            # the M = 1 bandwidth target applies from this layer size on
LARGE_TBPS = 3.5
M16_MAX = 1.1
W4A4_MAX = 1.2
M64_MIN = 2.0

DEFAULT_PATH = re.compile(r"^(fused( \(.*\))?|cublas)$")


def parse_bench(path):
    """{(layer, m, semantics): (µs, cuBLAS µs or None)} of the default rows; raises on a FAIL row."""
    rows = {}
    for line in open(path, encoding="utf-8"):
        c = [x.strip() for x in line.split("|")]
        if len(c) < 13 or not re.match(r"^\d+×\d+$", c[1]):
            continue
        if c[11].startswith("FAIL"):
            raise ValueError(f"{path}: {c[1]} M = {c[2]} {c[3]} failed its check ({c[11]})")
        if not DEFAULT_PATH.match(c[10]):
            continue
        cub = float(c[7]) if re.match(r"^[0-9.]+$", c[7]) else None
        rows[(c[1], int(c[2]), c[3])] = (float(c[4]), cub)
    return rows


def parse_stream(path):
    """{MB: best µs} of a bench_stream table."""
    best = {}
    for line in open(path, encoding="utf-8"):
        c = [x.strip() for x in line.split("|")]
        if len(c) > 7 and re.match(r"^[0-9.]+$", c[1]) and re.match(r"^[0-9.]+$", c[6]):
            mb = float(c[1])
            best[mb] = min(best.get(mb, float("inf")), float(c[6]))
    return best


def span(values, fmt="{:.1f}"):
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def layer_mb(layer):
    n, k = (int(x) for x in layer.split("×"))
    return n * k * BYTES_PER_WEIGHT / 1e6


def h200_m1_target_us(mb):
    """The M = 1 target time of a layer of `mb` MB on the H200."""
    return mb / LARGE_TBPS if mb >= LARGE_MB else 2.0 * mb / COPY_TBPS


def summarize(bench_files, stream_files, h200):
    runs = defaultdict(list)   # (layer, m, semantics) -> [µs]
    cublas = defaultdict(list)  # (layer, m) -> [µs]
    order = []
    for f in bench_files:
        for (layer, m, sem), (us, cub) in parse_bench(f).items():
            runs[(layer, m, sem)].append(us)
            if cub is not None and sem == "w4a16":
                cublas[(layer, m)].append(cub)
            if layer not in order:
                order.append(layer)
    ceiling = {}
    for f in stream_files:
        for mb, us in parse_stream(f).items():
            ceiling[mb] = min(ceiling.get(mb, float("inf")), us)

    def best(layer, m, sem):
        v = runs.get((layer, m, sem))
        return min(v) if v else None

    out = []
    head = ["N×K", "MB", "read ceiling µs", "M=1 w4a16 µs (TB/s)", "x ceiling", "cuBLAS bf16 M=1",
            "M=16 w4a16 (x M=1)", "w4a4 / w4a16 M=1, M=16", "w4a4-vllm / w4a16 M=1, M=16",
            "M=64 w4a16 / cuBLAS bf16 (speed-up)"]
    if h200:
        head.insert(5, "H200 M=1 target µs")
    out.append("| " + " | ".join(head) + " |")
    out.append("|---|" + "---:|" * (len(head) - 1))
    met = defaultdict(list)
    missed = defaultdict(list)

    def verdict(name, layer, ok):
        (met if ok else missed)[name].append(layer)

    for layer in order:
        mb = layer_mb(layer)
        cm = None
        for size, us in ceiling.items():  # the table's sizes are rounded to 0.1 MB
            if abs(size - mb) <= 0.06 + 0.001 * mb:
                cm = us
        a = runs.get((layer, 1, "w4a16"), [])
        b = runs.get((layer, 16, "w4a16"), [])
        cells = [layer, f"{mb:.1f}", f"{cm:.1f}" if cm else "-"]
        cells.append(f"{span(a)} ({span([mb / x for x in a], '{:.2f}')})" if a else "-")  # MB/µs = TB/s
        cells.append(f"{min(a) / cm:.2f}x" if a and cm else "-")
        if h200:
            t = h200_m1_target_us(mb)
            cells.append(f"{t:.1f}")
            if a:
                verdict("M = 1 at the H200 target", layer, min(a) <= t)
        c1 = cublas.get((layer, 1), [])
        cells.append(span(c1) if c1 else "-")
        if a and b:
            r = min(b) / min(a)
            cells.append(f"{span(b)} ({r:.2f}x)")
            verdict(f"M = 16 <= {M16_MAX}x M = 1", layer, r <= M16_MAX + 1e-9)
        else:
            cells.append(span(b) if b else "-")
        for sem in ("w4a4", "w4a4-vllm"):
            parts = []
            for m in (1, 16):
                w, q = best(layer, m, "w4a16"), best(layer, m, sem)
                parts.append(f"{q / w:.2f}x" if w and q else "-")
                if sem == "w4a4" and w and q:
                    verdict(f"w4a4 at M = {m} <= {W4A4_MAX}x w4a16", layer, q / w <= W4A4_MAX + 1e-9)
            cells.append(" / ".join(parts))
        c = runs.get((layer, 64, "w4a16"), [])
        c64 = cublas.get((layer, 64), [])
        if c and c64:
            s = min(c64) / min(c)
            cells.append(f"{span(c)} / {span(c64)} ({s:.2f}x)")
            verdict(f"M = 64 >= {M64_MIN}x cuBLAS bf16", layer, s >= M64_MIN - 1e-9)
        else:
            cells.append("-")
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    for name in sorted(set(met) | set(missed)):
        n = len(met[name]) + len(missed[name])
        line = f"- {name}: {len(met[name])} of {n}"
        if missed[name]:
            line += " (not: " + ", ".join(missed[name]) + ")"
        out.append(line)
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", nargs="+", help="bench_gemm outputs")
    ap.add_argument("--stream", action="append", default=[], help="a bench_stream output (repeatable)")
    ap.add_argument("--h200", action="store_true", help="also check the M = 1 targets, which are the H200's")
    a = ap.parse_args()
    try:
        print(summarize(a.bench, a.stream, a.h200))
    except (OSError, ValueError) as e:
        print(f"bench_summary: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
