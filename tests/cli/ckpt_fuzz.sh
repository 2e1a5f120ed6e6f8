#!/usr/bin/env bash
# Builds the checkpoint parser fuzz targets (fuzz/safetensors_header_fuzz.cpp, fuzz/gguf_fuzz.cpp) with clang++
# and libFuzzer + AddressSanitizer, then fuzzes each for NVFP4_FUZZ_SECONDS (default 30) from a small seed
# corpus. Exit 77 (skip) with a reason when clang++ or libFuzzer is not available.
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
build() {  # $1 target name, $2... sources below the root
  local name=$1; shift
  local srcs=()
  for s in "$@"; do srcs+=("$root/$s"); done
  if ! "$cxx" -std=c++17 -g -O1 -fsanitize=fuzzer,address -I"$root/src" -I"$root" "${inc[@]}" "${srcs[@]}" -o "$work/$name" \
       2>"$work/$name.build.log"; then
    echo "FAIL: fuzz target $name does not build"; cat "$work/$name.build.log"; exit 1
  fi
}
build safetensors fuzz/safetensors_header_fuzz.cpp src/io/safetensors.cpp src/io/file_util.cpp src/common/dtype.cpp \
  src/format/numerics.cpp
build gguf fuzz/gguf_fuzz.cpp src/io/gguf.cpp src/format/numerics.cpp

# Seed corpora: a valid file of each format and a few near-misses.
mkdir -p "$work/safetensors.corpus" "$work/gguf.corpus"
seed() {  # $1 name, $2 header text, $3 data bytes
  python3 - "$work/safetensors.corpus/$1" "$2" "$3" <<'PY'
import struct, sys
h = sys.argv[2].encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(range(int(sys.argv[3]))))
PY
}
seed valid '{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[8,12]}}' 12
seed overlap '{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}' 6
seed scalar '{"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"e":{"dtype":"I64","shape":[0],"data_offsets":[4,4]}}' 4
# GGUF v3: one string and one u32-array key, an F32 tensor (ne [8]) and an F16 one (ne [4, 2]), data aligned to 32.
python3 - "$work/gguf.corpus" <<'PY'
import struct, sys
def s(t):
    b = t.encode()
    return struct.pack("<Q", len(b)) + b
kv = s("general.architecture") + struct.pack("<I", 8) + s("llama")
kv += s("llama.dims") + struct.pack("<II", 9, 4) + struct.pack("<Q", 2) + struct.pack("<II", 4, 2)
info = s("a") + struct.pack("<I", 1) + struct.pack("<Q", 8) + struct.pack("<IQ", 0, 0)
info += s("b") + struct.pack("<I", 2) + struct.pack("<QQ", 4, 2) + struct.pack("<IQ", 1, 32)
head = b"GGUF" + struct.pack("<IQQ", 3, 2, 2) + kv + info
head += b"\0" * (-len(head) % 32)
data = struct.pack("<8f", *range(8)) + b"\0\x3c" * 8
open(sys.argv[1] + "/valid", "wb").write(head + data)
open(sys.argv[1] + "/truncated", "wb").write(head + data[:40])
open(sys.argv[1] + "/v2", "wb").write(b"GGUF" + struct.pack("<IQQ", 2, 0, 0))
PY
for t in safetensors gguf; do
  "$work/$t" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/$t-" "$work/$t.corpus" >"$work/$t.log" 2>&1
  rc=$?
  tail -15 "$work/$t.log"
  if [ $rc -ne 0 ]; then
    echo "FAIL: fuzzer of the $t parser found a problem (exit $rc)"
    grep -E "ERROR|SUMMARY|#[0-9]+ 0x" "$work/$t.log" | head -20
    for f in "$work/$t"-crash-* "$work/$t"-leak-* "$work/$t"-timeout-* "$work/$t"-oom-*; do
      [ -f "$f" ] && { echo "input $f:"; od -c "$f" | head -20; }
    done
    exit 1
  fi
  echo "ok: fuzzed the $t parser for ${secs}s without a finding"
done
