#!/usr/bin/env bash
# The whole test suite: install dependencies, build, and run every CTest label CI runs
# (unit, ops, model; 'heavy' and 'cuda' are left to scripts/test_heavy.sh and the GPU machine),
# then the safetensors fuzz corpus and unit tests again under ASan/UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh release
ctest --preset release
scripts/build.sh asan
ctest --preset asan
