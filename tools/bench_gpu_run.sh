#!/usr/bin/env bash
# One measuring run on a CUDA machine: build, GPU tests, then bench_gemm with the given arguments.
# Logs go to $NVFP4_BENCH_OUT (default ./bench-out): build.log, test_cuda.log, ctest.log, bench.md.
# Usage: tools/bench_gpu_run.sh [bench_gemm arguments...]
set -uo pipefail
out=${NVFP4_BENCH_OUT:-bench-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DNVFP4_CUDA_ARCHS=90a >"$out/build.log" 2>&1 &&
  cmake --build build-gpu --target test_backends_cuda test_backends_cublaslt bench_gemm -j"$(nproc)" >>"$out/build.log" 2>&1
rc=$?
echo "build rc=$rc in $(( $(date +%s) - t0 )) s"
if [ $rc -ne 0 ]; then grep -E "error|Error" "$out/build.log" | head -40; exit 1; fi
t0=$(date +%s)
build-gpu/tests/test_backends_cuda >"$out/test_cuda.log" 2>&1
echo "test_backends_cuda rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' "$out/test_cuda.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|error" "$out/test_cuda.log" | head -20
build-gpu/tests/test_backends_cublaslt >"$out/test_cublaslt.log" 2>&1
echo "test_backends_cublaslt rc=$?: $(grep -E '^\[  (PASSED|FAILED)' "$out/test_cublaslt.log" | tr '\n' ' ')"
for f in build-gpu/tests/test_backends_cuda*_tests.cmake; do cp "$f" "$out/cuda_tests_cmake.txt"; done
cmake --version | head -1
t0=$(date +%s)
ctest --test-dir build-gpu -L gpu -j4 --output-on-failure >"$out/ctest.log" 2>&1
echo "ctest -L gpu rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E 'tests passed|tests failed' "$out/ctest.log")"
grep -E "Failed|\*\*\*" "$out/ctest.log" | head -20
t0=$(date +%s)
build-gpu/bin/bench_gemm "$@" >"$out/bench.md" 2>&1
echo "bench_gemm rc=$? in $(( $(date +%s) - t0 )) s"
cat "$out/bench.md"
