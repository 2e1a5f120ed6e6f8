#!/usr/bin/env bash
# Dispatch as `nvfp4 inspect` reports it (SPEC §6): per-layer semantics/executor with --device cpu (so the
# answers do not depend on the machine), emulation flag and environment, the vLLM alias, flag beating the
# environment, errors shown per layer, the fallback warning once however many layers, JSON fields, and
# --explain-device. A tiny bf16 model is made with python3 and quantized with `nvfp4 quantize`.
#   $1: nvfp4 binary   $2: tests/data (unused)
set -uo pipefail
bin=$1
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bf16"
python3 - "$work" <<'PY'
import json, random, struct, sys
w = sys.argv[1]
random.seed(1)
def bf16(x):
    b = struct.unpack('<I', struct.pack('<f', x))[0]
    return struct.pack('<H', (b + 0x7FFF + ((b >> 16) & 1)) >> 16)
shapes = {"model.layers.0.mlp.down_proj.weight": (32, 64), "model.layers.0.mlp.up_proj.weight": (64, 32)}
hdr, data = {}, b''
for name, (n, k) in shapes.items():
    raw = b''.join(bf16(random.gauss(0, 0.05)) for _ in range(n * k))
    hdr[name] = {"dtype": "BF16", "shape": [n, k], "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
h = json.dumps(hdr).encode()
h += b' ' * ((8 - len(h) % 8) % 8)
open(w + '/bf16/model.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h + data)
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
           "intermediate_size": 64, "num_hidden_layers": 1, "torch_dtype": "bfloat16"}, open(w + '/bf16/config.json', 'w'))
json.dump({"model.layers.0.mlp.down_proj": 3.0, "model.layers.0.mlp.up_proj": 2.5}, open(w + '/calib.json', 'w'))
PY
"$bin" quantize "$work/bf16" "$work/w4a4" --scheme nvfp4 --calib-amax "$work/calib.json" >/dev/null 2>&1 \
  || { echo "FAIL: quantize nvfp4"; exit 1; }
"$bin" quantize "$work/bf16" "$work/w4a16" --scheme nvfp4a16 >/dev/null 2>&1 || { echo "FAIL: quantize nvfp4a16"; exit 1; }

fails=0
# check DESCRIPTION PATTERN [COUNT] -- command...: exit 0 and stdout matching PATTERN (COUNT lines if given).
check() {
  local what=$1 pattern=$2 count=""
  shift 2
  if [ "$1" != "--" ]; then count=$1; shift; fi
  shift
  local out rc n
  out=$("$@" 2>&1)
  rc=$?
  n=$(grep -cE -- "$pattern" <<<"$out")
  if [ "$rc" -ne 0 ] || [ "$n" -eq 0 ] || { [ -n "$count" ] && [ "$n" -ne "$count" ]; }; then
    echo "FAIL: $what: exit $rc, /$pattern/ matched $n line(s)${count:+ (want $count)}"
    echo "$out" | sed 's/^/      /'
    fails=$((fails + 1))
  else
    echo "ok:   $what: $(grep -E -- "$pattern" <<<"$out" | head -1 | sed 's/  */ /g')"
  fi
}
a=$work/w4a4
b=$work/w4a16
check "W4A4 on the CPU falls back to w4a16" 'down_proj .* w4a16 +cpu' -- "$bin" inspect "$a" --device cpu
check "fallback warning once for two layers" '^warning: +no native FP4 on the CPU \(--device cpu\); running W4A4 checkpoint as W4A16' 1 -- \
  "$bin" inspect "$a" --device cpu
check "--emulation gives w4a4" 'up_proj .* w4a4 +cpu' -- "$bin" inspect "$a" --device cpu --emulation
check "--emulation=vllm gives w4a4-vllm" 'up_proj .* w4a4-vllm +cpu' -- "$bin" inspect "$a" --device cpu --emulation=vllm
check "bare --emulation takes the flavour from the environment" 'up_proj .* w4a4-vllm +cpu' -- \
  env NVFP4_EMULATION_FLAVOR=vllm "$bin" inspect "$a" --device cpu --emulation
check "NVFP4_USE_EMULATION=1" 'up_proj .* w4a4 +cpu' -- env NVFP4_USE_EMULATION=1 "$bin" inspect "$a" --device cpu
check "vLLM alias VLLM_USE_NVFP4_CT_EMULATIONS=1" 'dispatch: +w4a4 on cpu \(VLLM_USE_NVFP4_CT_EMULATIONS=1' -- \
  env VLLM_USE_NVFP4_CT_EMULATIONS=1 "$bin" inspect "$a" --device cpu
check "NVFP4_DEVICE=cpu" 'no native FP4 on the CPU \(NVFP4_DEVICE=cpu\)' -- env NVFP4_DEVICE=cpu "$bin" inspect "$a"
check "environment backend that cannot run is an error per layer" \
  'dispatch: +error: NVFP4_LINEAR_BACKEND=cuda: the cuda executor needs a CUDA device' -- \
  env NVFP4_LINEAR_BACKEND=cuda "$bin" inspect "$a" --device cpu
check "flag beats environment" 'dispatch: +w4a16 on cpu .*--linear-backend cpu' -- \
  env NVFP4_LINEAR_BACKEND=cuda "$bin" inspect "$a" --device cpu --linear-backend cpu
check "cublaslt without a GPU is an error" 'error: --linear-backend cublaslt: cublaslt needs a CUDA device' -- \
  "$bin" inspect "$a" --device cpu --linear-backend cublaslt
check "W4A16 checkpoint with emulation is an error" \
  'error: --emulation asks for W4A4 emulation, but the checkpoint is W4A16' -- "$bin" inspect "$b" --device cpu --emulation
check "W4A16 checkpoint: w4a16, no warning" 'down_proj .* w4a16 +cpu' -- "$bin" inspect "$b" --device cpu
out=$("$bin" inspect "$b" --device cpu 2>&1)
if grep -q '^warning:' <<<"$out"; then echo "FAIL: W4A16 checkpoint printed a dispatch warning"; fails=$((fails + 1)); fi
check "JSON has semantics, executor and reason per layer" '"semantics": "w4a4"' 2 -- \
  "$bin" inspect "$a" --device cpu --emulation --json
check "JSON reason" '"reason": "--emulation; cpu' -- "$bin" inspect "$a" --device cpu --emulation --json
check "--explain-device shows the rules for both schemes" '^W4A16 layer: w4a16 on cpu' -- \
  "$bin" inspect "$a" --device cpu --explain-device
# This machine, whatever it is: must answer, and never pick cublaslt below compute capability 10.0.
out=$("$bin" inspect "$a" --explain-device 2>&1) || { echo "FAIL: inspect --explain-device on this machine"; fails=$((fails + 1)); }
echo "$out" | sed -n '/^device:/,$p' | sed 's/^/      /'
if grep -qE '^device: +NVIDIA .*\((7|8|9)\.[0-9]\)' <<<"$out" && grep -q 'cublaslt' <<<"$(grep '^dispatch:' <<<"$out")"; then
  echo "FAIL: cublaslt chosen on a device below 10.0"; fails=$((fails + 1))
fi
# A CUDA build on a machine without an NVIDIA driver says so (the runtime's own words speak of an old driver).
if grep -q '^build: *CUDA' <<<"$out" && [ ! -e /proc/driver/nvidia/version ]; then
  if ! grep -q '^device: *CPU (no CUDA device (no NVIDIA driver is installed' <<<"$out"; then
    echo "FAIL: no driver on this machine, but the device line does not say so"; fails=$((fails + 1))
  else
    echo "ok:   no NVIDIA driver here, and the device line says so"
  fi
fi

# Hypothetical devices: the decision a user would get there with this binary, before deploying.
check "--explain-device sm_90: W4A16 with the reason" '^W4A4 layer:  w4a16 on .*sm_90 < sm_100' -- \
  "$bin" inspect "$a" --explain-device sm_90
check "--explain-device cpu" '^W4A4 layer:  w4a16 on cpu' -- "$bin" inspect "$a" --explain-device cpu
check "--explain-device before PATH" '^W4A16 layer: ' -- "$bin" inspect --explain-device "$a"
if "$bin" inspect --help | grep -q -- '--explain-device' && "$bin" inspect "$a" --explain-device | grep -q '^build: *CUDA, archs .*sm_100'; then
  check "--explain-device sm_100 with sm_100 code: native FP4" '^W4A4 layer:  w4a4 on cublaslt' -- \
    "$bin" inspect "$a" --explain-device sm_100
else
  check "--explain-device sm_100 without sm_100 code: W4A16" '^W4A4 layer:  w4a16 on ' -- \
    "$bin" inspect "$a" --explain-device sm_100
fi
if "$bin" inspect "$a" --explain-device | grep -q '^build: *CUDA, archs .*sm_120\b'; then
  check "--explain-device sm_121 (GB10) with generic sm_120 code: native FP4" '^W4A4 layer:  w4a4 on cublaslt' -- \
    "$bin" inspect "$a" --explain-device sm_121
  check "--explain-device sm_103 (B300) with generic sm_100 code: native FP4" '^W4A4 layer:  w4a4 on cublaslt' -- \
    "$bin" inspect "$a" --explain-device sm_103
fi
if "$bin" inspect "$a" --explain-device | grep -q '^build: *CUDA, archs .*compute_100\b'; then
  check "--explain-device sm_110 (Thor) with compute_100 PTX: native FP4" '^W4A4 layer:  w4a4 on cublaslt' -- \
    "$bin" inspect "$a" --explain-device sm_110
fi
"$bin" inspect "$a" --explain-device sm_x >/dev/null 2>"$work/err"; rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "^error: --explain-device: 'sm_x' is not a device" "$work/err"; then
  echo "FAIL: a bad --explain-device value must be a usage error (rc=$rc)"; fails=$((fails + 1))
fi

if [ "$fails" -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all inspect dispatch checks passed"
