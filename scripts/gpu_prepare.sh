#!/usr/bin/env bash
# Here, on the dev machine: fills .gpu/ (ignored) with what scripts/gpu.sh needs on the GPU
# machine, which has no package registry: the Debian build dependencies as .deb files and the
# shared GPU kit (use-debs.sh, probe.py, hf_compare.py, peers/). Then carry `.gpu` to the GPU
# machine (the run tool's carry: [".gpu", ...]) and run scripts/gpu.sh there.
# usage: [NANOVLLM_GPU_BASE=<commit>] scripts/gpu_prepare.sh [EXTRA_DEBIAN_PACKAGE...]
set -euo pipefail
cd "$(dirname "$0")/.."
kit=${NANOVLLM_GPU_KIT:-../shared/gpu}
[ -x "$kit/fetch-debs.sh" ] || { echo "gpu_prepare: no GPU kit at $kit (set NANOVLLM_GPU_KIT)" >&2; exit 1; }
git check-ignore -q .gpu/x || { echo "gpu_prepare: .gpu/ must be ignored by git (.gitignore)" >&2; exit 1; }
mkdir -p .gpu
# Header-only dependencies the build may have gained since the kit's list was written.
extra=()
if grep -rqs "#include <boost/" src; then  # Boost.Beast / Asio (the server): headers only
  extra+=(libboost1.81-dev)
fi
"$kit/fetch-debs.sh" .gpu/debs "${extra[@]}" "$@"
[ -d .gpu/kit ] && chmod -R u+w .gpu/kit  # the shared kit's folders are read-only
rm -rf .gpu/kit
cp -r "$kit" .gpu/kit
chmod -R u+w .gpu/kit
# The Qwen3 tokenizer files, so that the GPU machine's model folder has them (nano-vllm needs them).
if scripts/tokenizer_files.sh .gpu/tokenizer > /dev/null; then
  echo "gpu_prepare: tokenizer files in .gpu/tokenizer"
else
  echo "gpu_prepare: no tokenizer files (run scripts/install_deps.sh); the peer phase will fail" >&2
fi
# nano-vllm's source, the yardstick of the peer phase (never committed: .gpu is ignored), from a
# git directory of GeeeekExplorer/nano-vllm (default: where the fetch tool leaves it).
peer_git=${NANOVLLM_PEER_GIT:-/work/.mirror/GeeeekExplorer+nano-vllm/repo}
if git --git-dir="$peer_git" rev-parse -q --verify HEAD > /dev/null 2>&1; then
  rm -rf .gpu/nano-vllm
  mkdir -p .gpu/nano-vllm
  git --git-dir="$peer_git" archive HEAD nanovllm | tar -x -C .gpu/nano-vllm
  echo "gpu_prepare: nano-vllm $(git --git-dir="$peer_git" rev-parse --short HEAD) in .gpu/nano-vllm"
else
  echo "gpu_prepare: no nano-vllm git directory at $peer_git (set NANOVLLM_PEER_GIT); the peer phase will fail" >&2
fi
# A base tree for gpu.sh's ab phase: NANOVLLM_GPU_BASE=<commit> (sources only: what the CLI and
# bench_cuda build from).
rm -rf .gpu/base
if [ -n "${NANOVLLM_GPU_BASE:-}" ]; then
  mkdir -p .gpu/base
  git archive "$NANOVLLM_GPU_BASE" | tar -x -C .gpu/base
  rm -rf .gpu/base/models .gpu/base/docs .gpu/base/training .gpu/base/python .gpu/base/tests/fuzz
  git rev-parse --short "$NANOVLLM_GPU_BASE" > .gpu/base/COMMIT
  echo "gpu_prepare: base tree $(cat .gpu/base/COMMIT) in .gpu/base ($(du -sh .gpu/base | cut -f1))"
fi
echo "gpu_prepare: .gpu ready ($(du -sh .gpu | cut -f1)); carry .gpu and run scripts/gpu.sh there"
