#!/usr/bin/env bash
# nanovllm vs llama.cpp on the same bf16 weights, same threads, interleaved runs (docs/llama_cpp.md).
#
#   scripts/llama_cpp/side_by_side.sh LLAMA_CPP_DIR MODEL_DIR [runs=3]
#
# LLAMA_CPP_DIR: a llama.cpp checkout built CPU-only into LLAMA_CPP_DIR/build (llama-bench and
# llama-batched-bench). MODEL_DIR: a Hugging Face bf16 folder (e.g. `nanovllm make-model --preset
# qwen3-0.6b --out DIR`); it is converted once to a bf16 GGUF (cached, redone when the model is newer).
# Each run is: nanovllm bench (16 seqs, + its 1-seq decode and 512-token prefill), llama-bench
# (pp512, tg128), nanovllm bench (32 seqs), llama-batched-bench (16 and 32 seqs); then one table.
# The read bandwidth is probed before each llama.cpp run (bench_probe, beside the nanovllm binary;
# nanovllm bench probes its own), and a second table gives each run kind's probes: on a VM whose
# bandwidth moves between phases, memory-bound figures follow the phase they ran in.
#
# Environment: NANOVLLM (binary; default build/release/nanovllm), THREADS (2), GGUF (llama.cpp's
# weights, used as given, e.g. a llama-quantize output; default MODEL_DIR/llama_cpp-bf16.gguf,
# converted from the folder when missing or older than it), OUT_DIR (raw logs; default a fresh temp folder),
# PYTHON (one with numpy), LLAMA_ARGS (extra flags for both llama.cpp tools, e.g. "-fa off"),
# NANOVLLM_ARGS (extra flags for nanovllm bench).
set -euo pipefail

die() { echo "side_by_side: $*" >&2; exit 1; }

[ $# -ge 2 ] && [ $# -le 3 ] || die "usage: $0 LLAMA_CPP_DIR MODEL_DIR [runs=3]"
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
llama_dir="$(cd "$1" 2>/dev/null && pwd)" || die "llama.cpp folder $1 does not exist"
model_dir="$(cd "$2" 2>/dev/null && pwd)" || die "model folder $2 does not exist"
runs="${3:-3}"
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || die "runs must be a positive integer, got '$runs'"
threads="${THREADS:-2}"
nanovllm="${NANOVLLM:-$repo/build/release/nanovllm}"
probe="$(dirname "$nanovllm")/bench_probe"
gguf="${GGUF:-$model_dir/llama_cpp-bf16.gguf}"
out_dir="${OUT_DIR:-$(mktemp -d /tmp/side_by_side.XXXXXX)}"
mkdir -p "$out_dir"
read -r -a llama_args <<< "${LLAMA_ARGS:-}"
read -r -a nanovllm_args <<< "${NANOVLLM_ARGS:-}"

# The batched figure: NPL sequences of PP prompt + TG output tokens (issue 10's workload).
pp=128 tg=128 npl_list=(16 32)
npl_max=32
ctx=$((npl_max * (pp + tg)))  # llama-batched-bench: n_ctx / n_seq_max = pp + tg cells per sequence

llama_bench="$llama_dir/build/bin/llama-bench"
llama_batched="$llama_dir/build/bin/llama-batched-bench"
for b in "$nanovllm" "$probe" "$llama_bench" "$llama_batched"; do
  [ -x "$b" ] || die "$b is missing: build it (scripts/build.sh release; llama.cpp: docs/llama_cpp.md)"
done
for f in config.json tokenizer.json; do
  [ -f "$model_dir/$f" ] || die "$model_dir/$f is missing: MODEL_DIR must be a Hugging Face folder"
done
ls "$model_dir"/*.safetensors >/dev/null 2>&1 || die "$model_dir has no .safetensors file"

# shellcheck source=scripts/llama_cpp/common.sh
. "$here/common.sh"
find_python
if [ -n "${GGUF:-}" ]; then  # given (e.g. a llama-quantize output): used as it is, never remade
  [ -f "$gguf" ] || die "GGUF=$gguf does not exist (scripts/llama_cpp/quantize.sh makes quantized ones)"
  echo "using $gguf as given"
else
  bf16_gguf "$llama_dir" "$model_dir" "$gguf"
fi

results="$out_dir/results.tsv"  # engine <tab> figure <tab> tok/s
: > "$results"
cores="$(nproc)"
load="$(cut -d' ' -f1 /proc/loadavg)"
echo "threads $threads, $runs run(s), raw logs in $out_dir; load average $load on $cores cores"
if "$python" -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 1.0 else 1)' "$load"; then
  echo "warning: the machine is busy (load $load): llama.cpp's spinning threads suffer most;" \
       "these figures compare schedulers, not engines" >&2
fi

nanovllm_bench() {  # $1 = sequences, $2 = log file, rest: extra flags
  local n="$1" log="$2"; shift 2
  "$nanovllm" bench --model "$model_dir" --threads "$threads" --num-seqs "$n" --min-len "$pp" \
    --max-input-len "$pp" --max-output-len "$tg" --seed 1 "$@" ${nanovllm_args[@]+"${nanovllm_args[@]}"} \
    > "$log" 2>&1 || { tail -20 "$log" >&2; die "nanovllm bench failed (log: $log)"; }
}

probe_bw() {  # $1 = the run kind it precedes, $2 = log file: the read bandwidth into the results
  "$probe" --threads "$threads" > "$2" 2>&1 || { tail -5 "$2" >&2; die "bench_probe failed (log: $2)"; }
  tail -n 1 "$2" | "$python" -c '
import json, sys
print("llama.cpp\tbw_%s\t%f" % (sys.argv[1], json.loads(sys.stdin.read())["read_gbs"]))' "$1" >> "$results" \
    || die "no JSON line at the end of $2"
}

for r in $(seq 1 "$runs"); do
  echo "run $r/$runs: nanovllm bench, 16 seqs (+ 1-seq decode, 512-token prefill)"
  log="$out_dir/nanovllm_16_$r.log"
  nanovllm_bench 16 "$log"
  tail -n 1 "$log" | "$python" -c '
import json, sys
j = json.loads(sys.stdin.read())
print("nanovllm\tdecode_1seq\t%f" % (1e3 / j["decode_1seq_ms_per_token"]))
print("nanovllm\tprefill_%d\t%f" % (j["prefill_tokens"], j["prefill_tokens"] / j["prefill_seconds"]))
print("nanovllm\tbatch_16\t%f" % j["total_tok_per_s"])
print("nanovllm\tbw_bench\t%f" % j["mem_bandwidth_gbs"])
print("nanovllm\tdecode_of_probe\t%f" % (100 * j["decode_bandwidth_fraction"]))
if "weights_read_gbs" in j:
    print("nanovllm\tbw_in_place\t%f" % j["weights_read_gbs"]["best"])
    print("nanovllm\tdecode_of_in_place\t%f" % (100 * j["decode_weights_read_fraction"]))' >> "$results" \
    || die "no JSON line at the end of $log"

  echo "run $r/$runs: llama-bench pp512, tg128"
  log="$out_dir/llama_bench_$r.log"
  probe_bw bench "$out_dir/probe_bench_$r.log"
  "$llama_bench" -m "$gguf" -t "$threads" -p 512 -n 128 -r 1 -o jsonl \
    ${llama_args[@]+"${llama_args[@]}"} > "$log" 2> "$log.err" \
    || { tail -20 "$log.err" >&2; die "llama-bench failed (log: $log.err)"; }
  "$python" -c '
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    j = json.loads(line)
    if j["n_gen"] == 0:
        print("llama.cpp\tprefill_%d\t%f" % (j["n_prompt"], j["avg_ts"]))
    elif j["n_prompt"] == 0:
        print("llama.cpp\tdecode_1seq\t%f" % j["avg_ts"])' "$log" >> "$results"

  echo "run $r/$runs: nanovllm bench, 32 seqs"
  log="$out_dir/nanovllm_32_$r.log"
  nanovllm_bench 32 "$log" --no-roofline
  tail -n 1 "$log" | "$python" -c '
import json, sys
j = json.loads(sys.stdin.read())
print("nanovllm\tbatch_32\t%f" % j["total_tok_per_s"])
print("nanovllm\tbw_batched\t%f" % j["mem_bandwidth_gbs"])' >> "$results" \
    || die "no JSON line at the end of $log"

  echo "run $r/$runs: llama-batched-bench, 16 and 32 seqs"
  log="$out_dir/llama_batched_$r.log"
  probe_bw batched "$out_dir/probe_batched_$r.log"
  "$llama_batched" -m "$gguf" -t "$threads" -c "$ctx" -b 2048 -ub 512 -npp "$pp" -ntg "$tg" \
    -npl "$(IFS=,; echo "${npl_list[*]}")" --output-format jsonl \
    ${llama_args[@]+"${llama_args[@]}"} > "$log" 2>&1 \
    || { tail -20 "$log" >&2; die "llama-batched-bench failed (log: $log)"; }
  "$python" -c '
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{\"n_kv_max\""):
        j = json.loads(line)
        print("llama.cpp\tbatch_%d\t%f" % (j["pl"], j["speed"]))' "$log" >> "$results"
done

"$python" - "$results" "$runs" "$load" "$(cut -d' ' -f1 /proc/loadavg)" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
runs = int(sys.argv[2])
vals = {}
for engine, fig, v in rows:
    vals.setdefault((engine, fig), []).append(float(v))
labels = {
    "decode_1seq": "1-seq decode, tok/s",
    "prefill_512": "512-token prefill, tok/s",
    "batch_16": "16 x (128+128), total tok/s",
    "batch_32": "32 x (128+128), total tok/s",
}
def cell(xs):
    return "%.1f / %.1f / %.1f" % (min(xs), statistics.median(xs), max(xs)) if xs else "missing"
print()
print("| figure | nanovllm min / median / max | llama.cpp min / median / max | ratio of medians |")
print("|---|---|---|---|")
bad = False
for fig, label in labels.items():
    a, b = vals.get(("nanovllm", fig), []), vals.get(("llama.cpp", fig), [])
    if len(a) != runs or len(b) != runs:
        bad = True
    ratio = "%.2fx" % (statistics.median(a) / statistics.median(b)) if a and b else "-"
    print("| %s | %s | %s | %s |" % (label, cell(a), cell(b), ratio))
# The read bandwidth each run kind started under: nanovllm bench's own probe (its 16-sequence run
# also gives the 1-sequence and prefill figures), bench_probe just before each llama.cpp tool.
print()
print("| read bandwidth probed before the runs, GB/s | nanovllm min / median / max | llama.cpp min / median / max |")
print("|---|---|---|")
print("| before the 1-seq decode and prefill runs (nanovllm bench 16 seqs; llama-bench) | %s | %s |"
      % (cell(vals.get(("nanovllm", "bw_bench"), [])), cell(vals.get(("llama.cpp", "bw_bench"), []))))
print("| before the batched runs (nanovllm bench 32 seqs; llama-batched-bench) | %s | %s |"
      % (cell(vals.get(("nanovllm", "bw_batched"), [])), cell(vals.get(("llama.cpp", "bw_batched"), []))))
# One-sequence decode is bound by the bytes of the weights: each run's tok/s over its probe.
per = {}
for engine in ("nanovllm", "llama.cpp"):
    d, bw = vals.get((engine, "decode_1seq"), []), vals.get((engine, "bw_bench"), [])
    if len(d) == len(bw) and d:
        per[engine] = statistics.median(x / y for x, y in zip(d, bw))
if len(per) == 2:
    print("\n1-seq decode per probed GB/s (each run's tok/s over its probe), medians: nanovllm %.3f, "
          "llama.cpp %.3f: %.2fx" % (per["nanovllm"], per["llama.cpp"], per["nanovllm"] / per["llama.cpp"]))
# The same decode against the read of the weights' own pages just before it (nanovllm bench's
# "in place" figure: memory need not be uniform, src/backend/cpu/roofline.h).
if vals.get(("nanovllm", "bw_in_place")):
    print("\nnanovllm 1-seq decode, its weight bytes a token at %s %% of its bench's probe and %s %% "
          "of the weights read in place (%s GB/s), min / median / max"
          % (cell(vals.get(("nanovllm", "decode_of_probe"), [])),
             cell(vals.get(("nanovllm", "decode_of_in_place"), [])),
             cell(vals.get(("nanovllm", "bw_in_place"), []))))
print("\nload average (1 min) before the first run: %s, after the last: %s" % (sys.argv[3], sys.argv[4]))
if bad:
    sys.exit("side_by_side: some figures are missing (see the logs)")
EOF
