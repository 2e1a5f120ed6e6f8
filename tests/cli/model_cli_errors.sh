#!/usr/bin/env bash
# The model verbs' error contract: usage errors exit 2, runtime errors exit 1 with one "error: ..." line that
# names the file, and import-gguf leaves no partial output. Needs no model: everything fails before loading.
# args: nvfp4 binary, tests/data directory.
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

expect() {  # expect RC PATTERN -- ARGS...
  local want=$1 pat=$2
  shift 3
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL: nvfp4 $* exited $rc, expected $want; stderr: $(head -c 300 "$tmp/err")"
    fails=$((fails + 1))
    return
  fi
  if [ -n "$pat" ] && ! grep -q -- "$pat" "$tmp/err"; then
    echo "FAIL: nvfp4 $*: stderr lacks '$pat': $(head -c 300 "$tmp/err")"
    fails=$((fails + 1))
  fi
  if [ "$want" -eq 1 ] && [ "$(grep -c '^error: ' "$tmp/err")" -ne 1 ]; then
    echo "FAIL: nvfp4 $*: expected exactly one 'error:' line: $(cat "$tmp/err")"
    fails=$((fails + 1))
  fi
}

expect 2 "model"        -- run -p hi
expect 2 "--semantics"  -- run -m "$tmp" -p hi --semantics w8a8
expect 2 "--device"     -- run -m "$tmp" -p hi --device tpu
expect 2 ""             -- run -m "$tmp" -p hi --temp -1
expect 1 "$tmp/tokenizer.json" -- run -m "$tmp" -p hi
expect 2 "--semantics"  -- eval -m "$tmp" -f /dev/null --semantics fp8
expect 1 "$tmp/tokenizer.json" -- eval -m "$tmp" -f /dev/null
expect 2 "output"       -- calibrate -m "$tmp" -f /dev/null
expect 1 "$tmp/nope"    -- calibrate -m "$tmp/nope" -f /dev/null -o "$tmp/a.json"
[ -e "$tmp/a.json" ] && { echo "FAIL: calibrate left $tmp/a.json"; fails=$((fails + 1)); }
expect 1 "$tmp/nope: no such model directory" -- run -m "$tmp/nope" -p hi
# NVFP4_NUM_THREADS: anything but an integer 1-4096 is a usage error for every verb (empty: unset).
NVFP4_NUM_THREADS=abc expect 2 "NVFP4_NUM_THREADS: invalid value 'abc'" -- run -m "$tmp/nope" -p hi
NVFP4_NUM_THREADS=0 expect 2 "NVFP4_NUM_THREADS" -- inspect "$tmp/nope"
NVFP4_NUM_THREADS=4097 expect 2 "NVFP4_NUM_THREADS" -- eval -m "$tmp/nope" -f /dev/null
NVFP4_NUM_THREADS=2 expect 1 "$tmp/nope: no such model directory" -- run -m "$tmp/nope" -p hi
NVFP4_NUM_THREADS= expect 1 "$tmp/nope: no such model directory" -- run -m "$tmp/nope" -p hi
printf 'x' >"$tmp/afile"
expect 1 "$tmp/afile: not a directory" -- eval -m "$tmp/afile" -f /dev/null

# import-gguf: not a GGUF, truncated GGUF, existing output.
printf 'not a gguf file at all' >"$tmp/bad.gguf"
expect 1 "not a GGUF file" -- import-gguf "$tmp/bad.gguf" "$tmp/out1"
printf 'GGUF\003\000\000\000\001' >"$tmp/short.gguf"
expect 1 "truncated" -- import-gguf "$tmp/short.gguf" "$tmp/out1"
for p in "$tmp/out1" "$tmp/out1.partial"; do
  [ -e "$p" ] && { echo "FAIL: import-gguf left $p"; fails=$((fails + 1)); }
done
mkdir -p "$tmp/exists"
expect 2 "already exists" -- import-gguf "$tmp/bad.gguf" "$tmp/exists"
expect 1 "cannot open" -- import-gguf "$tmp/missing.gguf" "$tmp/out2"

[ "$fails" -eq 0 ] && echo "model verbs: error contract holds"
exit $((fails > 0))
