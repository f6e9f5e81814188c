// AVX-VNNI tiles of the quantized GEMM (qgemm.h): the AVX2 tiles' code (qgemm_tiles_ymm.inc)
// with vpdpwssd / vpdpbusd in their VEX form, which Intel client cores without AVX-512 (Alder
// Lake and later) run: one instruction where AVX2 spends vpmaddwd + vpaddd (int8 weights) or
// vpmaddubsw + vpaddw + a share of vpmaddwd (int4). Same layout, same x codes, the same exact
// integer sums flushed the same way, so the same bits as the AVX2 tiles.
#include <immintrin.h>

#include <array>
#include <cstring>
#include <utility>

#include "backend/cpu/qgemm.h"
#include "runtime/tensor.h"
#include "util/check.h"

namespace nanovllm::cpu::detail {
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
constexpr bool kAvxVnni = true;
#include "backend/cpu/qgemm_tiles_ymm.inc"
#pragma GCC pop_options

}  // namespace

QTileFn avxvnni_qtile(QuantScheme scheme, int rows, int blocks) {
  return ymm_qtile(scheme, rows, blocks);
}

}  // namespace nanovllm::cpu::detail
