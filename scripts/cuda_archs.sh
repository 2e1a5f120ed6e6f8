#!/usr/bin/env bash
# Prints the NVFP4_CUDA_ARCHS list for this machine's GPUs (as nvidia-smi reports their compute capabilities):
# 9.0 -> 90a (the wgmma kernel needs the arch-specific target), 8.x -> 80, 10.x -> 100, 12.x -> 120 (generic
# code runs on every minor version of its major one), anything else from 10.0 on -> compute_100 (PTX), below 8.0
# -> 80 (it builds; the library then says the GPU cannot run its kernels). One entry per kind, ';'-separated.
# Prints nothing (and exits 1) when nvidia-smi is missing or lists no GPU.
set -uo pipefail
caps=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null) || exit 1
archs=()
while read -r cc; do
  [ -n "$cc" ] || continue
  major=${cc%%.*}
  case "$major" in
    ''|*[!0-9]*) continue ;;
  esac
  if [ "$major" -lt 9 ]; then a=80
  elif [ "$major" -eq 9 ]; then a=90a
  elif [ "$major" -eq 10 ] || [ "$major" -eq 12 ]; then a=${major}0
  else a=compute_100
  fi
  case " ${archs[*]-} " in *" $a "*) ;; *) archs+=("$a") ;; esac
done <<<"$caps"
[ ${#archs[@]} -gt 0 ] || exit 1
(IFS=';'; echo "${archs[*]}")
