#!/usr/bin/env bash
# Installs what nvfp4 needs on a Debian machine (apt packages, a project venv with the Python tools'
# packages) and builds it into build/. Idempotent: a second run installs nothing and rebuilds only what
# changed. Quiet when there is nothing to do.
#   NVFP4_BUILD_DIR   build folder (default: build)
#   NVFP4_CUDA_ARCHS  CUDA architectures (default: CMakeLists.txt's list)
#   NVFP4_ENABLE_CUDA ON/OFF (default ON: CUDA executors are built when nvcc is found)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

apt_pkgs=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev
          nlohmann-json3-dev libcli11-dev python3 python3-venv clang)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  # python3/python3-venv are only needed when no working python3 with venv exists already.
  if python3 -c 'import venv, ensurepip' 2>/dev/null; then
    tmp=(); for p in "${missing[@]}"; do [[ $p == python3 || $p == python3-venv ]] || tmp+=("$p"); done
    missing=("${tmp[@]+"${tmp[@]}"}")
  fi
fi
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python tools: pinned versions, installed into .venv once (a stamp records what was installed).
req="$root/tools/requirements.txt"
stamp="$root/.venv/.nvfp4-req"
if [ ! -x "$root/.venv/bin/python" ]; then
  echo "setup: creating .venv" >&2
  python3 -m venv "$root/.venv"
fi
if ! cmp -s "$req" "$stamp" 2>/dev/null; then
  echo "setup: installing Python packages from tools/requirements.txt" >&2
  "$root/.venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
  cp "$req" "$stamp"
fi

build="${NVFP4_BUILD_DIR:-build}"
cfg=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNVFP4_PYTHON="$root/.venv/bin/python")
[ -n "${NVFP4_CUDA_ARCHS:-}" ] && cfg+=("-DNVFP4_CUDA_ARCHS=${NVFP4_CUDA_ARCHS}")
[ -n "${NVFP4_ENABLE_CUDA:-}" ] && cfg+=("-DNVFP4_ENABLE_CUDA=${NVFP4_ENABLE_CUDA}")
# nvcc is often installed outside PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
if [ ! -f "$build/build.ninja" ] || [ -n "${NVFP4_CUDA_ARCHS:-}${NVFP4_ENABLE_CUDA:-}" ]; then
  cmake "${cfg[@]}" >"$build.configure.log" 2>&1 || { cat "$build.configure.log" >&2; exit 1; }
fi
# Compiler output goes to a log; on failure its tail is shown and the script fails.
# (ninja's dry run always reports work here: it cannot re-check the CONFIGURE_DEPENDS globs without running.)
if [ ! -x "$build/bin/nvfp4" ] || [ -n "$(find src tests bench CMakeLists.txt -newer "$build/bin/nvfp4" -type f 2>/dev/null | head -1)" ]; then
  echo "setup: building in $build/ (the first build takes several minutes on 2 cores)" >&2
fi
if ! cmake --build "$build" -j "$(nproc)" >"$build.build.log" 2>&1; then
  grep -E "error|Error|FAILED" "$build.build.log" | head -40 >&2
  echo "setup: build failed (full log: $build.build.log)" >&2
  exit 1
fi
