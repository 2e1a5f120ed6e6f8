#!/usr/bin/env bash
# Validation on a machine with an NVIDIA GPU: builds with CUDA, runs every GPU test, and — given an NVFP4 model
# directory — runs the model on the CPU and on the GPU in each semantics and compares the greedy answers and
# the perplexities. Prints a markdown summary (also written to $NVFP4_CHECK_OUT/summary.md).
#   scripts/gpu_check.sh [MODEL_DIR]
#   NVFP4_BUILD_DIR   build folder (default: build-gpu)
#   NVFP4_CUDA_ARCHS  architectures (default: those of this machine's GPUs, scripts/cuda_archs.sh: 80 for A100 and
#                     RTX 30xx/40xx, 90a for H100/H200, 100 for B200/B300, 120 for RTX 50xx and GB10)
#   NVFP4_CHECK_OUT   where logs go (default: $NVFP4_BUILD_DIR/check)
#   NVFP4_CHECK_TESTS 0 to skip the GPU tests (model comparison only)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build="${NVFP4_BUILD_DIR:-build-gpu}"
out="${NVFP4_CHECK_OUT:-$build/check}"
mkdir -p "$out"
model="${1:-}"
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

archs="${NVFP4_CUDA_ARCHS:-$(scripts/cuda_archs.sh)}"
archs="${archs:-90a}"
echo "architectures: $archs" | tee -a "$out/gpu.txt"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNVFP4_CUDA_ARCHS="$archs" \
    >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
fi
cmake --build "$build" -j "$(nproc)" >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
gpu_rc=0
if [ "${NVFP4_CHECK_TESTS:-1}" != 0 ]; then
  ctest --test-dir "$build" -L gpu --output-on-failure -j 1 >"$out/ctest_gpu.log" 2>&1
  gpu_rc=$?
  tail -25 "$out/ctest_gpu.log"
else
  echo "GPU tests skipped (NVFP4_CHECK_TESTS=0)" >"$out/ctest_gpu.log"
fi

summary="$out/summary.md"
{
  echo "# GPU check, $(date -u +%Y-%m-%d), $(head -1 "$out/gpu.txt")"
  echo
  echo "GPU tests (ctest -L gpu): $(grep -E 'tests passed|tests failed' "$out/ctest_gpu.log" | tail -1) (exit $gpu_rc)"
} >"$summary"

if [ -n "$model" ]; then
  bin="$build/bin/nvfp4"
  prompt="What is the capital of France? Answer in one sentence."
  "$bin" inspect "$model" >"$out/inspect.txt" 2>&1
  {
    echo
    echo "Model: $model. Greedy answer (--chat, 32 tokens) and perplexity on the first 300 tokens of data/eval.txt."
    echo
    echo "| run | flags | answer | perplexity | same answer as CPU |"
    echo "|---|---|---|---|---|"
  } >>"$summary"
  declare -A ref
  while IFS='|' read -r name sem flags; do
    log="$out/run_$name.log"
    ans=$("$bin" run -m "$model" -p "$prompt" --chat -n 32 $flags 2>"$log" | tr '\n' ' ')
    ppl=$("$bin" eval -m "$model" -f data/eval.txt --max-tokens 300 --json $flags 2>>"$log" |
          python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["perplexity"])' 2>/dev/null || echo "failed")
    same=""
    if [ "${name%%_*}" = cpu ]; then ref[$sem]="$ans"; same="(reference)"
    elif [ "${ref[$sem]:-}" = "$ans" ]; then same="yes"; else same="no"; fi
    echo "| $name | \`$flags\` | ${ans:0:90} | $ppl | $same |" >>"$summary"
    grep -E "on cuda|on cpu|warning" "$log" | sort -u | head -12 | sed 's/^/    /' >>"$out/executors.txt"
  done <<'RUNS'
cpu_w4a16|w4a16|--device cpu --semantics w4a16
cpu_w4a4|w4a4|--device cpu --semantics w4a4
cpu_w4a4vllm|w4a4-vllm|--device cpu --semantics w4a4-vllm
gpu_default_hybrid|w4a16|--ops cpu
gpu_default_ops|w4a16|--ops cuda
gpu_emulation_ops|w4a4|--ops cuda --emulation
gpu_emulation_vllm_ops|w4a4-vllm|--ops cuda --emulation=vllm
RUNS
fi
cat "$summary"
exit $gpu_rc
