#!/usr/bin/env bash
# scripts/cuda_archs.sh (the architecture list scripts/gpu_check.sh builds by default) against a stand-in
# nvidia-smi that reports given compute capabilities: each kind of GPU maps to its entry, repeats collapse,
# and no nvidia-smi or no GPU gives nothing and exit 1.
#   $1: nvfp4 binary (unused)   $2: tests/data (unused)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
# case CAPS WANT_OUTPUT WANT_RC: CAPS one compute capability per line ("none": no nvidia-smi at all).
case_() {
  local caps=$1 want=$2 want_rc=$3 out rc
  rm -rf "$work/bin" && mkdir -p "$work/bin"
  if [ "$caps" != none ]; then
    printf '#!%s\nprintf "%%b" "%s"\n' "$BASH" "$caps" >"$work/bin/nvidia-smi"  # PATH holds nothing else
    chmod +x "$work/bin/nvidia-smi"
  fi
  out=$(PATH="$work/bin" "$BASH" "$root/scripts/cuda_archs.sh")
  rc=$?
  if [ "$out" != "$want" ] || [ "$rc" -ne "$want_rc" ]; then
    echo "FAIL: capabilities '$caps' -> '$out' (exit $rc), want '$want' (exit $want_rc)"
    fails=$((fails + 1))
  else
    echo "ok:   '$caps' -> '$out'"
  fi
}
case_ '9.0\n' '90a' 0
case_ '9.0\n9.0\n' '90a' 0
case_ '8.0\n8.6\n8.9\n' '80' 0
case_ '10.0\n10.3\n' '100' 0
case_ '12.0\n' '120' 0
case_ '12.1\n' '120' 0
case_ '11.0\n' 'compute_100' 0
case_ '7.5\n9.0\n12.0\n' '80;90a;120' 0
case_ '' '' 1
case_ none '' 1
if [ "$fails" -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all cuda_archs checks passed"
