#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang-14 (-fsanitize=fuzzer,address,undefined)
# into build/fuzz/ and runs each for N seconds (default 30; as many at once as there are cores)
# on a working corpus seeded from tests/fuzz/corpus/<target>/. Fails if any target finds a
# crash, a leak or a timeout; the input is left in build/fuzz/<target>/crash-* (reproduce:
# build/fuzz/<target>_fuzz <file>).
# Usage: scripts/fuzz.sh [--cpu] [seconds] [target...]   (targets: the *_fuzz.cpp names without _fuzz)
#   --cpu: seconds are CPU-seconds of the fuzzing process (utime + stime), not wall time, so a run
#          beside other work (or under nice) still fuzzes for the stated CPU time; the fuzzer is
#          interrupted (SIGINT, final stats printed) once it has used them.
set -euo pipefail
cd "$(dirname "$0")/.."
cpu_mode=0
if [ "${1:-}" = "--cpu" ]; then cpu_mode=1; shift; fi
seconds=${1:-30}
shift || true
out=build/fuzz
mkdir -p "$out"
cxx=clang++-14
command -v "$cxx" >/dev/null || { echo "fuzz.sh: $cxx is missing: run scripts/install_deps.sh (clang-14 libclang-rt-14-dev)" >&2; exit 1; }
launcher=""; command -v ccache >/dev/null && launcher=ccache
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/*_fuzz.cpp; do t=$(basename "$f" .cpp); targets+=("${t%_fuzz}"); done
fi

# The library sources the targets need (the parsers and what they include), built once.
lib_sources=(src/tokenizer/*.cpp src/util/*.cpp src/model/hf_config.cpp src/model/quantization_config.cpp
             src/model/safetensors.cpp
             src/runtime/tensor.cpp src/server/openai_request.cpp src/server/json_decoder.cpp
             src/server/request_decoder.cpp src/structured/*.cpp)
flags="-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -I$PWD/src -I$PWD/include $(pkg-config --cflags libpcre2-8 libutf8proc)"
libs="-lfmt $(pkg-config --libs libpcre2-8 libutf8proc)"
{
  echo "cxxflags = $flags"
  echo "rule cxx"
  echo "  command = $launcher $cxx \$cxxflags -MMD -MF \$out.d -c \$in -o \$out"
  echo "  depfile = \$out.d"
  echo "  deps = gcc"
  echo "rule link"
  echo "  command = $cxx -fsanitize=fuzzer,address,undefined \$in -o \$out $libs"
  objs=()
  for s in "${lib_sources[@]}"; do
    o="obj/${s%.cpp}.o"; objs+=("$o")
    echo "build $o: cxx $PWD/$s"
  done
  for t in "${targets[@]}"; do
    echo "build obj/${t}_fuzz.o: cxx $PWD/tests/fuzz/${t}_fuzz.cpp"
    echo "build ${t}_fuzz: link obj/${t}_fuzz.o ${objs[*]}"
  done
} > "$out/build.ninja"
if ! ninja -C "$out" -j "$(nproc)" $(for t in "${targets[@]}"; do echo "${t}_fuzz"; done) > "$out/build.log" 2>&1; then
  echo "fuzz.sh: building the fuzz targets failed:" >&2
  grep -E "error|FAILED|undefined reference" "$out/build.log" | head -n 20 >&2
  exit 1
fi

export NANOVLLM_SOURCE_DIR=$PWD  # targets that load files of the repository (http_request: Qwen3's tokenizer)
# One target: fuzzes it and prints its summary; returns 1 on a finding.
fuzz_one() {
  local t=$1 work="$out/$1"
  mkdir -p "$work/corpus"
  [ -d "tests/fuzz/corpus/$t" ] && cp -n "tests/fuzz/corpus/$t"/* "$work/corpus/" 2>/dev/null || true
  local log="$work/fuzz.log"
  # --cpu runs beside other work (or under nice), where one input's wall time can be many times
  # its CPU time: a 60 s per-input limit there, so that a starved input is not reported as a hang.
  local wall=$seconds per_input=10
  if [ $cpu_mode = 1 ]; then wall=$((seconds * 100)); per_input=60; fi
  echo "fuzz $t: ${seconds}s$([ $cpu_mode = 1 ] && echo " of CPU time")"
  (cd "$work" && exec "../${t}_fuzz" -max_total_time="$wall" -max_len=8192 -timeout=$per_input \
          -rss_limit_mb=2048 -print_final_stats=1 corpus > fuzz.log 2>&1) &
  local pid=$! interrupted=0
  if [ $cpu_mode = 1 ]; then
    local tick used
    tick=$(getconf CLK_TCK)
    while kill -0 "$pid" 2>/dev/null; do
      # fields 14 and 15 of /proc/PID/stat: utime and stime in clock ticks (comm has no spaces here)
      used=$(awk -v t="$tick" '{ print int(($14 + $15) / t) }' "/proc/$pid/stat" 2>/dev/null || echo 0)
      if [ "$used" -ge "$seconds" ]; then kill -INT "$pid"; interrupted=1; break; fi
      sleep 5
    done
  fi
  local rc=0; wait "$pid" || rc=$?
  # libFuzzer exits 72 when interrupted: that is how a --cpu run ends, not a finding
  if [ $rc != 0 ] && ! { [ $interrupted = 1 ] && [ $rc = 72 ]; }; then
    echo "fuzz $t: FAILED (see $log; inputs: $work/crash-*, leak-*, timeout-*)"
    tail -n 40 "$log"
    return 1
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$log" | sed "s/^/  /"
  grep -E "^Done [0-9]+ runs|run interrupted" "$log" | tail -n 1 | sed "s/^/  /"
}

# As many targets at once as there are cores (each single-threaded, each for its full time);
# summaries printed in order as they end.
status=0
jobs=$(nproc)
pids=()
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  mkdir -p "$out/$t"
  fuzz_one "$t" > "$out/$t/summary" 2>&1 &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ] || [ "$i" -eq $((${#targets[@]} - 1)) ]; then
    for j in "${!pids[@]}"; do
      k=$((i - ${#pids[@]} + 1 + j))
      if ! wait "${pids[$j]}"; then status=1; fi
      cat "$out/${targets[$k]}/summary"
    done
    pids=()
  fi
done
exit $status
