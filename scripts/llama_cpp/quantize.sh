#!/usr/bin/env bash
# Quantized GGUFs of a Hugging Face bf16 folder with llama.cpp's llama-quantize: the yardstick for
# our own int8/int4 weights (docs/quantization.md).
#
#   scripts/llama_cpp/quantize.sh LLAMA_CPP_DIR MODEL_DIR TYPE...     e.g. ... models/default q8_0 q4_0
#
# LLAMA_CPP_DIR: a llama.cpp checkout built into LLAMA_CPP_DIR/build with the llama-quantize target
# (cmake --build build --target llama-quantize). MODEL_DIR gets llama_cpp-bf16.gguf (made by
# hf_to_gguf_bf16.py when missing or older than the weights, config, tokenizer or converter) and
# llama_cpp-<type>.gguf per TYPE (lower-cased; any llama-quantize type name), redone when the bf16
# GGUF is newer. Each quantization prints the type every tensor got and the file size; the full
# llama-quantize log is kept in LOG_DIR (default a fresh temp folder).
#
# Environment: THREADS (2), PYTHON (one with numpy), LOG_DIR, QUANT_ARGS (extra flags for
# llama-quantize, e.g. "--pure"; they do not change the file name, so delete old outputs first).
set -euo pipefail

die() { echo "quantize: $*" >&2; exit 1; }

[ $# -ge 3 ] || die "usage: $0 LLAMA_CPP_DIR MODEL_DIR TYPE... (e.g. q8_0 q4_0)"
here="$(cd "$(dirname "$0")" && pwd)"
llama_dir="$(cd "$1" 2>/dev/null && pwd)" || die "llama.cpp folder $1 does not exist"
model_dir="$(cd "$2" 2>/dev/null && pwd)" || die "model folder $2 does not exist"
shift 2
threads="${THREADS:-2}"
log_dir="${LOG_DIR:-$(mktemp -d /tmp/quantize.XXXXXX)}"
mkdir -p "$log_dir"
read -r -a quant_args <<< "${QUANT_ARGS:-}"

quantize="$llama_dir/build/bin/llama-quantize"
[ -x "$quantize" ] || die "$quantize is missing: cmake --build $llama_dir/build --target llama-quantize"
for f in config.json tokenizer.json; do
  [ -f "$model_dir/$f" ] || die "$model_dir/$f is missing: MODEL_DIR must be a Hugging Face folder"
done
ls "$model_dir"/*.safetensors >/dev/null 2>&1 || die "$model_dir has no .safetensors file"

# The bf16 GGUF (common.sh: converted once, again when its sources are newer).
# shellcheck source=scripts/llama_cpp/common.sh
. "$here/common.sh"
bf16="$model_dir/llama_cpp-bf16.gguf"
bf16_gguf "$llama_dir" "$model_dir" "$bf16"

for type in "$@"; do
  type="${type,,}"
  out="$model_dir/llama_cpp-$type.gguf"
  log="$log_dir/quantize-$(basename "$model_dir")-$type.log"
  if [ -f "$out" ] && [ "$out" -nt "$bf16" ]; then
    echo "using cached $out"
    continue
  fi
  echo "quantizing $bf16 -> $out ($type, log $log)"
  "$quantize" ${quant_args[@]+"${quant_args[@]}"} "$bf16" "$out.tmp" "$type" "$threads" > "$log" 2>&1 \
    || { rm -f "$out.tmp"; tail -20 "$log" >&2; die "llama-quantize $type failed (log: $log)"; }
  mv "$out.tmp" "$out"
  # Per-tensor lines read "[ i/ n] NAME - [shape], type = bf16, converting to q4_0 .. size = ..."
  # (or "..., size = ..." for tensors kept as they are); blk.N. is folded into blk.*.
  sed -nE 's/^\[ *[0-9]+\/ *[0-9]+\] *([^ ]+) .*type = *([A-Za-z0-9_]+)(, converting to ([A-Za-z0-9_]+))?.*/\1 \2 \4/p' "$log" |
    awk '{ name = $1; sub(/^blk\.[0-9]+\./, "blk.*.", name); t = ($3 != "") ? $3 : $2
           n[name " -> " t]++ }
         END { for (k in n) printf "  %-32s x%d\n", k, n[k] }' | sort
  echo "  $(basename "$out"): $(stat -c %s "$out") bytes;$(sed -n 's/.*quant size *=//p' "$log")"
done
