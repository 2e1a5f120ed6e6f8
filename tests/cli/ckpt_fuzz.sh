#!/usr/bin/env bash
# Builds the safetensors header fuzz target (fuzz/safetensors_header_fuzz.cpp) with clang++ and libFuzzer +
# AddressSanitizer, then fuzzes it for NVFP4_FUZZ_SECONDS (default 30) from a small seed corpus.
# Exit 77 (skip) with a reason when clang++ or libFuzzer is not available.
#   $1: nvfp4 binary (unused)   $2: tests/data
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
secs=${NVFP4_FUZZ_SECONDS:-30}
cxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$cxx" ]; then echo "skip: clang++ not found (libFuzzer needs clang)"; exit 77; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$work/probe.cpp"
if ! "$cxx" -fsanitize=fuzzer,address "$work/probe.cpp" -o "$work/probe" 2>"$work/probe.log"; then
  echo "skip: $cxx cannot link -fsanitize=fuzzer,address: $(head -1 "$work/probe.log")"; exit 77
fi
inc=()
for d in /usr/include /usr/local/include; do [ -f "$d/nlohmann/json.hpp" ] && inc+=(-I"$d"); done
if ! "$cxx" -std=c++17 -g -O1 -fsanitize=fuzzer,address -I"$root/src" "${inc[@]}" \
     "$root/fuzz/safetensors_header_fuzz.cpp" "$root/src/io/safetensors.cpp" "$root/src/io/file_util.cpp" "$root/src/common/dtype.cpp" \
     "$root/src/format/numerics.cpp" -o "$work/fuzz" 2>"$work/build.log"; then
  echo "FAIL: fuzz target does not build"; cat "$work/build.log"; exit 1
fi
# Seed corpus: a valid two-tensor file and a few near-misses.
mkdir -p "$work/corpus"
seed() {  # $1 name, $2 header text, $3 data bytes
  python3 - "$work/corpus/$1" "$2" "$3" <<'PY'
import struct, sys
h = sys.argv[2].encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(range(int(sys.argv[3]))))
PY
}
seed valid '{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[8,12]}}' 12
seed overlap '{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}' 6
seed scalar '{"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"e":{"dtype":"I64","shape":[0],"data_offsets":[4,4]}}' 4
"$work/fuzz" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/" "$work/corpus" >"$work/fuzz.log" 2>&1
rc=$?
tail -15 "$work/fuzz.log"
if [ $rc -ne 0 ]; then
  echo "FAIL: fuzzer found a problem (exit $rc)"
  for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
    [ -f "$f" ] && { echo "input $f:"; od -c "$f" | head -20; }
  done
  exit 1
fi
echo "ok: fuzzed parse_safetensors for ${secs}s without a finding"
