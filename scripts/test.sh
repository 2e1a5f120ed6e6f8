#!/usr/bin/env bash
# The whole test suite: set-up (scripts/setup.sh), build, then every ctest test. GPU tests (label "gpu")
# skip with a printed reason when no GPU is present. Extra arguments go to ctest (e.g. -L gpu).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
"$root/scripts/setup.sh"
build="${NVFP4_BUILD_DIR:-build}"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 900 "$@"
