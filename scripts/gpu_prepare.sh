#!/usr/bin/env bash
# Here, on the dev machine: fills .gpu/ (ignored) with what scripts/gpu.sh needs on the GPU
# machine, which has no package registry: the Debian build dependencies as .deb files and the
# shared GPU kit (use-debs.sh, probe.py, hf_compare.py, peers/). Then carry `.gpu` to the GPU
# machine (the run tool's carry: [".gpu", ...]) and run scripts/gpu.sh there.
# usage: scripts/gpu_prepare.sh [EXTRA_DEBIAN_PACKAGE...]
set -euo pipefail
cd "$(dirname "$0")/.."
kit=${NANOVLLM_GPU_KIT:-../shared/gpu}
[ -x "$kit/fetch-debs.sh" ] || { echo "gpu_prepare: no GPU kit at $kit (set NANOVLLM_GPU_KIT)" >&2; exit 1; }
git check-ignore -q .gpu/x || { echo "gpu_prepare: .gpu/ must be ignored by git (.gitignore)" >&2; exit 1; }
mkdir -p .gpu
# Header-only dependencies the build may have gained since the kit's list was written.
extra=()
if grep -rqs "find_package(Boost" CMakeLists.txt src --include=CMakeLists.txt --include='*.cmake'; then
  extra+=(libboost1.81-dev)
fi
"$kit/fetch-debs.sh" .gpu/debs "${extra[@]}" "$@"
[ -d .gpu/kit ] && chmod -R u+w .gpu/kit  # the shared kit's folders are read-only
rm -rf .gpu/kit
cp -r "$kit" .gpu/kit
chmod -R u+w .gpu/kit
echo "gpu_prepare: .gpu ready ($(du -sh .gpu | cut -f1)); carry .gpu and run scripts/gpu.sh there"
