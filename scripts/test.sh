#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run):
#   1. install every dependency the tests need (scripts/install_deps.sh: apt packages, the npm
#      references and tokenizer files; a test whose reference is missing fails, never skips);
#   2. build and run every CTest label but 'heavy' and 'cuda' (scripts/test_heavy.sh and the GPU
#      machine run those);
#   3. the ops and model labels again with NANOVLLM_CPU_ISA=avx2, so that the AVX2 kernels are
#      tested on an AVX-512 machine too;
#   4. the unit label and the op-level cuda_emu tests (the CUDA kernels on the emulator) under
#      ASan/UBSan;
#   5. every libFuzzer target (scripts/fuzz.sh) for FUZZ_SECONDS (default 30) seconds each.
# Fails if any test fails or is skipped (CTest's "***Skipped" / "Not Run").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
mkdir -p build

# Runs ctest with the given arguments, keeps its output in build/<log>, and fails if a test was
# skipped or did not run (the presets already leave out the 'heavy' and 'cuda' labels).
run_ctest() {
  local log=build/$1
  shift
  ctest "$@" 2>&1 | tee "$log"
  local skipped
  skipped=$(grep -cE '\*\*\*Skipped|\*\*\*Not Run' "$log" || true)
  if [ "$skipped" -ne 0 ]; then
    echo "test.sh: $skipped test(s) skipped or not run (see $log); every test outside the heavy and cuda labels must run:" >&2
    grep -E '\*\*\*Skipped|\*\*\*Not Run' "$log" >&2
    exit 1
  fi
}

scripts/build.sh release
run_ctest ctest-release.log --preset release
NANOVLLM_CPU_ISA=avx2 run_ctest ctest-release-avx2.log --preset release --label-regex '^(ops|model)$'
scripts/build.sh asan
run_ctest ctest-asan.log --preset asan
scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
