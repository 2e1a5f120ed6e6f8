#!/usr/bin/env bash
# A change against its base on one CUDA machine in one run: builds the working tree and a base tree (a source
# tarball, e.g. `git archive HEAD`) side by side, runs the GPU tests on the working tree, then alternates
# bench_gemm between the two builds ROUNDS times, so that the numbers come from the same machine, clocks and hour
# (docs/PERF.md's method for every kept change). Logs go to $NVFP4_BENCH_OUT (default ./bench-out): ctest.log,
# the sanitizer logs, bench_{new,base}_R.md; the build logs to /tmp/nvfp4-ab-build{,_base}.log (their errors printed).
# Usage: tools/ab_gpu_run.sh BASE.tar ROUNDS "NEW bench_gemm arguments" "BASE bench_gemm arguments"
#   NVFP4_AB_TESTS=0 skips the GPU tests; NVFP4_AB_SANITIZE=GTEST_FILTER runs compute-sanitizer on those tests,
#   with each tool of NVFP4_AB_SANITIZE_TOOLS (default memcheck; e.g. "memcheck racecheck"), into TOOL.log.
set -uo pipefail
if [ $# -ne 4 ]; then sed -n 7,9p "$0" >&2; exit 2; fi
base_tar=$1 rounds=$2 new_args=$3 base_args=$4
out=${NVFP4_BENCH_OUT:-bench-out}
mkdir -p "$out"
base=/tmp/nvfp4-ab-base
rm -rf "$base" && mkdir -p "$base" && tar -xf "$base_tar" -C "$base" || { echo "cannot unpack $base_tar" >&2; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee /tmp/nvfp4-ab-gpu.txt
t0=$(date +%s)
jobs=$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))
(cmake -S "$base" -B "$base/build-gpu" -G Ninja -DNVFP4_CUDA_ARCHS=90a &&
  cmake --build "$base/build-gpu" --target bench_gemm -j"$jobs") >/tmp/nvfp4-ab-build_base.log 2>&1 &
pid=$!
(cmake -S . -B build-gpu -G Ninja -DNVFP4_CUDA_ARCHS=90a &&
  cmake --build build-gpu --target test_backends_cuda test_backends_cublaslt bench_gemm -j"$jobs") >/tmp/nvfp4-ab-build.log 2>&1
rc=$?
wait $pid
rc_base=$?
echo "builds rc=$rc (new) rc=$rc_base (base) in $(( $(date +%s) - t0 )) s"
if [ $rc -ne 0 ] || [ $rc_base -ne 0 ]; then grep -hE "error|Error" /tmp/nvfp4-ab-build.log /tmp/nvfp4-ab-build_base.log | head -40; exit 1; fi
if [ "${NVFP4_AB_TESTS:-1}" != 0 ]; then
  t0=$(date +%s)
  ctest --test-dir build-gpu -L gpu -j4 --output-on-failure >"$out/ctest.log" 2>&1
  echo "ctest -L gpu rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E 'tests passed|tests failed' "$out/ctest.log")"
  grep -E "Failed|\*\*\*" "$out/ctest.log" | head -20
fi
if [ -n "${NVFP4_AB_SANITIZE:-}" ]; then
  for tool in ${NVFP4_AB_SANITIZE_TOOLS:-memcheck}; do
    t0=$(date +%s)
    compute-sanitizer --tool "$tool" build-gpu/tests/test_backends_cuda --gtest_filter="$NVFP4_AB_SANITIZE" \
      >"$out/$tool.log" 2>&1
    echo "$tool rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$out/$tool.log" | tr '\n' ' ')"
  done
fi
for r in $(seq 1 "$rounds"); do
  for side in new base; do
    if [ $side = new ]; then bin=build-gpu/bin/bench_gemm args=$new_args; else bin=$base/build-gpu/bin/bench_gemm args=$base_args; fi
    t0=$(date +%s)
    # shellcheck disable=SC2086
    $bin $args >"$out/bench_${side}_$r.md" 2>&1
    echo "bench $side round $r rc=$? in $(( $(date +%s) - t0 )) s"
  done
done
