#!/usr/bin/env bash
# Opcode histogram of the CUDA kernels whose (mangled) name contains a pattern, from cuobjdump's SASS.
# Usage: tools/bench_sass_stats.sh <binary-or-library> <name-pattern> [top-N]
# Example: tools/bench_sass_stats.sh build-gpu/src/libnvfp4_cuda.a 'fused_gemm_kernelI13__nv_bfloat16Li0ELi1ELi4E'
set -euo pipefail
bin=$1 pat=$2 top=${3:-40}
cuobjdump -sass "$bin" |
  awk -v pat="$pat" '/Function :/ { on = index($0, pat) > 0; if (on) print "#", $0; next }
                     on && /\/\*[0-9a-f]+\*\// { print }' |
  sed -E -n 's/^#.*/&/p; s/.*\*\/ +(@!?U?P[0-9T] +)?([A-Z0-9_]+(\.[A-Z0-9_]+)*).*/\2/p' |
  grep -v '^#' | sort | uniq -c | sort -rn | head -n "$top"
