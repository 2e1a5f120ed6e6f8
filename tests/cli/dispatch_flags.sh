#!/usr/bin/env bash
# Dispatch flags and environment of the CLI (src/cli/dispatch_flags.cpp, SPEC §6): invalid values are usage
# errors (exit 2) that list the valid values, reported before any file is read; valid values are accepted.
#   $1: nvfp4 binary   $2: tests/data (unused)
set -uo pipefail
bin=$1
fails=0
missing=/nonexistent/model/dir

# expect CODE PATTERN -- command...: runs the command, checks the exit code and that stderr matches PATTERN.
expect() {
  local code=$1 pattern=$2
  shift 3
  local err rc
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qE -- "$pattern" <<<"$err"; then
    echo "FAIL: $* -> exit $rc (want $code), stderr: $err (want /$pattern/)"
    fails=$((fails + 1))
  else
    echo "ok:   $* -> exit $rc: $(head -1 <<<"$err")"
  fi
}

run=("$bin" run -m "$missing" -p hi)
# Bad flag values: exit 2, the valid values listed.
expect 2 'cpu.*cuda.*cublaslt' -- "${run[@]}" --linear-backend tensorrt
expect 2 'cpu\|cuda\|cuda:N|cpu, cuda, cuda:N' -- "${run[@]}" --device gpu
expect 2 'cpu\|cuda\|cuda:N|cpu, cuda, cuda:N' -- "${run[@]}" --device cuda:x
expect 2 'native.*vllm' -- "${run[@]}" --emulation=marlin
expect 2 'auto.*cpu.*cuda' -- "${run[@]}" --ops gpu
# Bad environment values: exit 2, naming the variable and the valid values.
expect 2 "NVFP4_LINEAR_BACKEND: invalid value 'tensorrt' \(valid: cpu, cuda, cublaslt\)" -- \
  env NVFP4_LINEAR_BACKEND=tensorrt "${run[@]}"
expect 2 "NVFP4_USE_EMULATION: invalid value 'maybe'" -- env NVFP4_USE_EMULATION=maybe "${run[@]}"
expect 2 "VLLM_USE_NVFP4_CT_EMULATIONS: invalid value '2'" -- env VLLM_USE_NVFP4_CT_EMULATIONS=2 "${run[@]}"
expect 2 "NVFP4_EMULATION_FLAVOR: invalid value 'x' \(valid: native, vllm\)" -- env NVFP4_EMULATION_FLAVOR=x "${run[@]}"
expect 2 "disagree" -- env NVFP4_USE_EMULATION=1 VLLM_USE_NVFP4_CT_EMULATIONS=0 "${run[@]}"
expect 2 "NVFP4_DEVICE: invalid value 'tpu'" -- env NVFP4_DEVICE=tpu "${run[@]}"
expect 2 "NVFP4_CUDA_GRAPHS: invalid value 'sometimes'" -- env NVFP4_CUDA_GRAPHS=sometimes "${run[@]}"
# Valid values are accepted: the command gets as far as the (missing) model and fails there with exit 1.
expect 1 "$missing" -- "${run[@]}" --linear-backend cpu --device cpu --emulation=vllm
expect 1 "$missing" -- env NVFP4_CUDA_GRAPHS=off "${run[@]}"
expect 1 "$missing" -- "${run[@]}" --emulation
expect 1 "$missing" -- "${run[@]}" --ops auto
expect 1 "$missing" -- "${run[@]}" --ops cpu
expect 1 "$missing" -- env NVFP4_USE_EMULATION=1 NVFP4_EMULATION_FLAVOR=vllm VLLM_USE_NVFP4_CT_EMULATIONS=true "${run[@]}"
# `--emulation DIR`-style misuse cannot swallow the next argument: --emulation takes no separate value.
expect 1 "$missing" -- "$bin" run --emulation -m "$missing" -p hi

if [ "$fails" -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all dispatch flag checks passed"
