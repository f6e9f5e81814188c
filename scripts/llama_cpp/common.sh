# shellcheck shell=bash disable=SC2154
# Shared by the llama.cpp scripts, which source it after defining die() and $here.

# Sets python: $PYTHON, or a python3 with numpy (Debian's python3-numpy lives in
# /usr/bin/python3; a pyenv may shadow it).
find_python() {
  python="${PYTHON:-}"
  if [ -z "$python" ]; then
    for p in python3 /usr/bin/python3; do
      if command -v "$p" >/dev/null && "$p" -c 'import numpy' 2>/dev/null; then python="$p"; break; fi
    done
  fi
  [ -n "$python" ] || die "no python3 with numpy found: apt-get install python3-numpy (or set PYTHON)"
}

# bf16_gguf LLAMA_DIR MODEL_DIR GGUF: converts MODEL_DIR to a bf16 GGUF once; again when the
# weights, config, tokenizer or the converter are newer than the GGUF.
bf16_gguf() {
  local llama_dir="$1" model_dir="$2" gguf="$3" stale=0 f
  [ -f "$gguf" ] || stale=1
  for f in "$model_dir"/*.safetensors "$model_dir/config.json" "$model_dir/tokenizer.json" \
           "$here/hf_to_gguf_bf16.py"; do
    if [ "$f" -nt "$gguf" ]; then stale=1; fi
  done
  if [ "$stale" = 1 ]; then
    [ -n "${python:-}" ] || find_python
    echo "converting $model_dir -> $gguf"
    "$python" "$here/hf_to_gguf_bf16.py" --llama-cpp "$llama_dir" "$model_dir" "$gguf"
  else
    echo "using cached $gguf"
  fi
}
