// The quantized GEMM's layout, packing and driver (the tiles are in qgemm_avx2.cpp).
#include "backend/cpu/qgemm.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/isa.h"
#include "runtime/tensor.h"
#include "util/check.h"

namespace nanovllm::cpu {

QuantLayout quant_layout(QuantScheme scheme, int64_t n, int64_t k) {
  NV_CHECK(scheme.enabled() && n > 0 && k > 0, "quant_layout of [{}, {}]", n, k);
  QuantLayout l;
  l.scheme = scheme;
  l.n = n;
  l.k = k;
  l.kpad = (k + 7) / 8 * 8;
  const bool int4 = scheme.format == QuantFormat::Int4;
  NV_CHECK(scheme.group % 8 == 0 && (scheme.group > 0 || !int4) &&
               scheme.group <= (int4 ? kInt4MaxGroup : kInt8Chunk),
           "quant_layout group {}", scheme.group);
  l.kg = scheme.group ? scheme.group : kInt8Chunk;
  l.groups = (l.kpad + l.kg - 1) / l.kg;
  l.nblocks = (n + kQBlockCols - 1) / kQBlockCols;
  const size_t headers = scheme.group ? size_t(l.groups) * 32 : 32;
  l.block_bytes = headers + size_t(l.kpad) * (int4 ? 4 : 8);  // 8 columns of 1/2 or 1 byte
  l.block_bytes = (l.block_bytes + 63) / 64 * 64;              // each block on a cache line
  return l;
}

void pack_quantized_blocks(void* dst, const QuantizedWeight& w, const QuantLayout& l, int64_t b0,
                           int64_t b1) {
  NV_CHECK(w.n == l.n && w.k == l.k && w.scheme.format == l.scheme.format, "pack [{}, {}]", w.n, w.k);
  const bool int4 = l.scheme.format == QuantFormat::Int4;
  const int64_t wg = w.groups();
  for (int64_t b = b0; b < b1; ++b) {
    uint8_t* p = static_cast<uint8_t*>(dst) + size_t(b) * l.block_bytes;
    std::memset(p, 0, l.block_bytes);
    // Code of (column c of the block, k index i); 0 past the edges.
    auto code = [&](int64_t c, int64_t i) -> int {
      const int64_t j = b * kQBlockCols + c;
      return (j < l.n && i < l.k) ? w.q[size_t(j * l.k + i)] : 0;
    };
    for (int64_t g = 0; g < l.groups; ++g) {
      if (g == 0 || l.scheme.group) {  // the group's header (int8 per row: only the first)
        for (int64_t c = 0; c < kQBlockCols; ++c) {
          const int64_t j = b * kQBlockCols + c;
          const bool real = j < l.n && g < wg;
          const float s = real ? w.scale[size_t(j * wg + g)] : 0.0f;
          if (int4) {
            const float z = real ? w.zero[size_t(j * wg + g)] : 0.0f;
            const uint16_t h[2] = {f32_to_f16(s), f32_to_f16(z)};
            std::memcpy(p + 2 * c, &h[0], 2);
            std::memcpy(p + 16 + 2 * c, &h[1], 2);
          } else {
            std::memcpy(p + 4 * c, &s, 4);
          }
        }
        p += 32;
      }
      const int64_t k0 = g * l.kg, pairs = l.group_len(g) / 2;
      if (!int4) {
        for (int64_t pr = 0; pr < pairs; pr += 2) {
          for (int64_t c = 0; c < kQBlockCols; ++c) {
            for (int e = 0; e < 2; ++e) {
              p[(c * 2 + e) * 2] = uint8_t(code(c, k0 + 2 * pr + e));
              p[(c * 2 + e) * 2 + 1] = uint8_t(code(c, k0 + 2 * (pr + 1) + e));
            }
          }
          p += 32;
        }
        continue;
      }
      for (int64_t o = 0; o < 2 * pairs; o += 8) {  // 8 k a 32-byte row
        for (int64_t c = 0; c < kQBlockCols; ++c) {
          for (int i = 0; i < 4; ++i)
            p[4 * c + i] = uint8_t(code(c, k0 + o + i) | code(c, k0 + o + 4 + i) << 4);
        }
        p += 32;
      }
    }
  }
}

void unpack_quantized_row(float* out, const void* packed, const QuantLayout& l, int64_t row) {
  NV_CHECK(row >= 0 && row < l.n, "row {} of {}", row, l.n);
  const uint8_t* p = static_cast<const uint8_t*>(packed) + size_t(row / kQBlockCols) * l.block_bytes;
  const int64_t c = row % kQBlockCols;
  const bool int4 = l.scheme.format == QuantFormat::Int4;
  float s = 0, z = 0;
  for (int64_t g = 0; g < l.groups; ++g) {
    if (g == 0 || l.scheme.group) {
      if (int4) {
        uint16_t h[2];
        std::memcpy(&h[0], p + 2 * c, 2);
        std::memcpy(&h[1], p + 16 + 2 * c, 2);
        s = f16_to_f32(h[0]);
        z = f16_to_f32(h[1]);
      } else {
        std::memcpy(&s, p + 4 * c, 4);
      }
      p += 32;
    }
    const int64_t k0 = g * l.kg, len = l.group_len(g);
    for (int64_t i = 0; i < len && k0 + i < l.k; ++i) {
      const int64_t pr = i / 2, e = i % 2;
      if (int4) {
        const uint8_t byte = p[(i / 8) * 32 + 4 * c + i % 4];
        const int q = i % 8 < 4 ? byte & 15 : byte >> 4;
        out[k0 + i] = (float(q) - z) * s;
      } else {
        const int8_t q = int8_t(p[(pr / 2) * 32 + (c * 2 + e) * 2 + pr % 2]);
        out[k0 + i] = float(q) * s;
      }
    }
    p += len * (int4 ? 4 : 8);
  }
}

QGemmIsa select_qgemm_isa(CpuIsa want) {
  __builtin_cpu_init();
  const bool vnni = cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
  const bool avx_vnni = __builtin_cpu_supports("avxvnni");
  if (want == CpuIsa::AVX512 && !vnni)
    fail("NANOVLLM_CPU_ISA=avx512: this CPU lacks AVX-512 VNNI (use avx2 or auto)");
  if (want == CpuIsa::AVXVNNI && !avx_vnni)
    fail("NANOVLLM_CPU_ISA=avxvnni: this CPU lacks AVX-VNNI (use avx2 or auto)");
  if (want == CpuIsa::AMX && !cpu_has_amx_int8())
    fail(
        "NANOVLLM_CPU_ISA=amx: this CPU (or its OS) does not let this process use AMX INT8 "
        "tiles (use avx512, avx2 or auto)");
  if (want != CpuIsa::AVX512 && avx512_allowed(want) && cpu_has_amx_int8())
    return QGemmIsa::AMX_INT8;
  if (avx512_allowed(want) && vnni) return QGemmIsa::AVX512_VNNI;
  return want != CpuIsa::AVX2 && avx_vnni ? QGemmIsa::AVX_VNNI : QGemmIsa::AVX2;
}

const char* qgemm_isa_name(QGemmIsa isa) {
  switch (isa) {
    case QGemmIsa::AVX2:
      return "avx2";
    case QGemmIsa::AVX_VNNI:
      return "avx_vnni";
    case QGemmIsa::AVX512_VNNI:
      return "avx512_vnni";
    case QGemmIsa::AMX_INT8:
      return "amx_int8";
  }
  return "?";
}

namespace {

// Bytes of the x planes of an m-row batch: two bytes a code, rows rounded up to 16.
size_t amx_planes_bytes(const QuantLayout& l, int64_t m) {
  return size_t(2 * ((m + 15) / 16 * 16) * detail::amx_plane_k(l));
}

// Bytes of the wide tiles' weight copies: two pairs of blocks a thread (none below
// kAmxWideRows rows).
size_t amx_btiles_bytes(const QuantLayout& l, int64_t m, int threads) {
  return m >= detail::kAmxWideRows ? size_t(threads) * 2 * detail::amx_pair_tiles_bytes(l) : 0;
}

// The AMX INT8 tiles over the batch: its int16 codes (`codes`, [m][kpad]) split into the two
// planes (`planes`, amx_planes_bytes), then each thread's units of 2 blocks (4 on the wide
// tiles), with every 16-row panel of an M block (its planes in L2) in turn while the unit's
// weights (the wide tiles: their 16-column copy, in `btiles`: amx_btiles_bytes) stay in L1.
void amx_qgemm8(const QGemmArgs& a, ThreadPool& pool, const uint8_t* codes, const float* xscale,
                void* planes, uint8_t* btiles) {
  const QuantLayout& l = *a.layout;
  const int64_t m = a.m, kp = detail::amx_plane_k(l), m16 = (m + 15) / 16 * 16;
  uint8_t* x = static_cast<uint8_t*>(planes);
  // The rows past m: zero codes (their outputs are not stored).
  std::memset(x + (m / 16) * kp * 32, 0, size_t((m16 - m / 16 * 16) * kp * 2));
  pool.parallel_for(m, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r)
      detail::amx_x_planes(reinterpret_cast<const int16_t*>(codes) + r * l.kpad, l.kpad, kp, r, x);
  });
  // From kAmxWideRows rows, 4 blocks a tile on 16-column B tiles (their copy made once an M
  // block); below, 2 blocks on the packed 8-column ones as they lie.
  const bool wide = m >= detail::kAmxWideRows;
  const int64_t ublocks = wide ? 4 : 2;
  const int64_t units = (l.nblocks + ublocks - 1) / ublocks;
  const int64_t chunk = std::clamp<int64_t>(units / (pool.size() * 8), 1, 8);
  // Rows a block whose planes stay in L2 (512 KiB) while a chunk's units stream past them.
  const int64_t mc = std::max<int64_t>(16, (int64_t(512) << 10) / (kp * 2) / 16 * 16);
  const size_t pair_bytes = wide ? detail::amx_pair_tiles_bytes(l) : 0;
  run_chunks(pool, units, chunk, [&](int64_t u0, int64_t u1, int thread) {
    uint8_t* bt = btiles + size_t(thread) * 2 * pair_bytes;  // this thread's copies
    for (int64_t m0 = 0; m0 < m; m0 += mc) {
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t b = ublocks * u;
        const uint8_t* w = static_cast<const uint8_t*>(a.packed_w) + size_t(b) * l.block_bytes;
        if (wide) {
          auto blk = [&](int64_t i) {
            return w + size_t(b + i < l.nblocks ? i : 0) * l.block_bytes;
          };
          detail::amx_pair_tiles(l, blk(0), blk(1), bt);
          detail::amx_pair_tiles(l, blk(2), blk(3), bt + pair_bytes);
        }
        for (int64_t r = m0; r < std::min(m, m0 + mc); r += 16) {
          detail::AmxQTile t;
          t.x = x + r * kp * 2;
          t.xscale = xscale + r;
          t.w = w;
          t.layout = &l;
          t.out = a.out + r * a.ldo + b * kQBlockCols;
          t.ldo = a.ldo;
          t.bias = a.bias ? a.bias + b * kQBlockCols : nullptr;
          t.rows = int(std::min<int64_t>(16, m - r));
          t.ncols = int(std::min<int64_t>(ublocks * kQBlockCols, l.n - b * kQBlockCols));
          if (wide) {
            t.b = bt;
            t.pair_bytes = pair_bytes;
            detail::amx_qtile8_wide(t);
          } else {
            detail::amx_qtile8(t);
          }
        }
      }
    }
  });
}

}  // namespace

void qgemm(const QGemmArgs& a, ThreadPool& pool, QGemmIsa isa) {
  const QuantLayout& l = *a.layout;
  const int64_t m = a.m;
  if (m == 0) return;
  const bool int4 = l.scheme.format == QuantFormat::Int4;
  // Scratch: x codes [m][kpad] (int16; int4: int8), scales [m] (int4: [m][groups]) f32, and for
  // int4 the groups' scaled code sums [m][groups] f32.
  const int64_t code_bytes = int4 ? 1 : 2, xs_per_row = int4 ? l.groups : 1;
  const size_t xq_bytes = (size_t(m * l.kpad * code_bytes) + 63) / 64 * 64;
  const size_t xs_bytes = (size_t(m * xs_per_row) * 4 + 63) / 64 * 64;
  const size_t sum_bytes = int4 ? size_t(m * l.groups) * 4 : 0;
  const bool amx = isa == QGemmIsa::AMX_INT8 && !int4 && m >= detail::kAmxMinRows &&
                   detail::amx_qgemm8_supports(l);
  const size_t sum_bytes_aligned = (sum_bytes + 63) / 64 * 64;
  const size_t plane_bytes = amx ? amx_planes_bytes(l, m) : 0;
  const size_t btile_bytes = amx ? amx_btiles_bytes(l, m, pool.size()) : 0;
  GemmScratch own;
  GemmScratch& scratch = a.scratch ? *a.scratch : own;
  const bool vnni = isa == QGemmIsa::AVX512_VNNI || isa == QGemmIsa::AMX_INT8;
  // Batches of more than 8 rows on the AVX-512 VNNI tiles: tall tiles of up to 16 rows (qgemm.h,
  // kQMaxRowsTall), whose x codes are interleaved into a copy of their own after the codes.
  const bool tall = vnni && !amx && m > detail::kQMaxRowsVnni;
  const size_t fixed_bytes = xq_bytes + xs_bytes + sum_bytes_aligned + plane_bytes + btile_bytes;
  uint8_t* base =
      static_cast<uint8_t*>(scratch.reserve(fixed_bytes + (tall ? xq_bytes : size_t(0))));
  uint8_t* xtall = tall ? base + fixed_bytes : nullptr;
  float* xscale = reinterpret_cast<float*>(base + xq_bytes);
  float* xsum = int4 ? reinterpret_cast<float*>(base + xq_bytes + xs_bytes) : nullptr;
  auto quantize_rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (int4) {
        detail::quantize_x_i8(a.x + r * a.ldx, l.k, l, reinterpret_cast<int8_t*>(base) + r * l.kpad,
                              xscale + r * l.groups, xsum + r * l.groups);
      } else {
        detail::quantize_x_i16(a.x + r * a.ldx, l.k, l,
                               reinterpret_cast<int16_t*>(base) + r * l.kpad, xscale + r);
      }
    }
  };
  if (m >= 4 * pool.size()) {
    pool.parallel_for(m, [&](int64_t r0, int64_t r1, int) { quantize_rows(r0, r1); });
  } else {
    quantize_rows(0, m);
  }
  if (tall) {
    // Each tall tile's rows (16 from row 0; a last tile of 9-15 rows is tall too, one of up to 8
    // reads the codes as they are), in units of 256 four-byte columns; on the pool's threads
    // from two tiles on (one tile, a decode step's: 1-6 units, ~1-5 us, which a dispatch costs
    // as much as it saves: M = 16 1% faster on the caller alone, M = 512 12% slower there).
    const int64_t row_bytes = l.kpad * code_bytes, cols = row_bytes / 4, unit_cols = 256;
    const int64_t per_tile = (cols + unit_cols - 1) / unit_cols;
    const int64_t tiles =
        m / detail::kQMaxRowsTall + (m % detail::kQMaxRowsTall > detail::kQMaxRowsVnni);
    auto interleave = [&](int64_t u0, int64_t u1) {
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t r = u / per_tile * detail::kQMaxRowsTall, c0 = u % per_tile * unit_cols;
        const int rows = int(std::min<int64_t>(detail::kQMaxRowsTall, m - r));
        detail::interleave_x_rows(xtall + r * row_bytes, base + r * row_bytes, row_bytes, rows, c0,
                                  std::min(cols, c0 + unit_cols));
      }
    };
    if (tiles > 1) {
      pool.parallel_for(tiles * per_tile, [&](int64_t u0, int64_t u1, int) { interleave(u0, u1); });
    } else {
      interleave(0, tiles * per_tile);
    }
  }

  if (amx) {
    uint8_t* planes = base + xq_bytes + xs_bytes + sum_bytes_aligned;
    amx_qgemm8(a, pool, base, xscale, planes, planes + plane_bytes);
    return;
  }
  // AVX2 (and AVX-VNNI) tiles: 4 rows x 2 blocks, or 1 row x 4 blocks (a lone row streams 4
  // blocks at once); AVX-VNNI int8 from 5 rows on: 8 rows x 1 block (qgemm.h).
  // AVX-512 VNNI: up to 4 rows x 4 blocks, 8 rows x 2 blocks from 5 rows on (qgemm.h).
  // For int4, measured on a Zen 3 at M = 16 and 64 (6144 x 1024, 2 threads): 4 x 2 at 152 G
  // multiply-adds a second, 3 x 2 at 142-147, 4 x 1 at 134. AVX-512 VNNI tiles: 4 rows x 4
  // blocks (two zmm of 16 columns), a lone row 4 blocks too. (With the old prefetch two tiles
  // ahead, a lone row ran faster on 2 blocks than on 4: 4 blocks put the prefetch 64 KiB ahead,
  // past the L1; one-row tiles now prefetch 1 KiB ahead in each stream, kRowAheadBytes.) The
  // threads claim the column blocks in chunks of units of 4 (a thread whose stream runs slower
  // takes fewer, where halves fixed in advance left the other waiting; below); a chunk
  // walks its units over M blocks of rows whose x codes stay in L2 while the unit's weights stay
  // in L1.
  const bool wide = vnni && m > detail::kQMaxRows;  // 8-row tiles of 2 blocks (16 if tall)
  const bool wide_ymm = isa == QGemmIsa::AVX_VNNI && !int4 && m > detail::kQMaxRows;  // 8 x 1
  const int max_rows = tall       ? detail::kQMaxRowsTall
                       : wide     ? detail::kQMaxRowsVnni
                       : wide_ymm ? detail::kQMaxRowsAvxVnni
                                  : detail::kQMaxRows;
  const auto tile_for = vnni                        ? detail::avx512_qtile
                        : isa == QGemmIsa::AVX_VNNI ? detail::avxvnni_qtile
                                                    : detail::avx2_qtile;
  static const bool row_prefetch = !cpu_is_amd();  // qgemm.h, kRowAheadBytes
  static const bool stream_nta = cpu_is_zen1();    // qgemm.h, kRowNtaAheadBytes
  const int64_t units = (l.nblocks + 3) / 4;
  const int64_t mc = std::max<int64_t>(
      max_rows, (int64_t(192) << 10) / (l.kpad * code_bytes) / max_rows * max_rows);
  // Several M blocks (prefill): one contiguous range of units a thread, as the bf16 GEMM does
  // (gemm.cpp); on a Zen 4 (2 threads) the int8 Qwen3-0.6B shapes at M = 4,096 ran at 393-396 G
  // ops/s on the AVX-512 VNNI tiles against 378-384 in chunks of a few units, 247-256 against
  // 235-249 on the AVX2 ones (M = 512, four alternated rounds: from 6% slower to 5% faster).
  const int64_t chunk = m > mc ? (units + pool.size() - 1) / pool.size()
                               : std::clamp<int64_t>(units / (pool.size() * 8), 1, 8);
  auto body = [&](int64_t u0, int64_t u1) {
    const int64_t b_end = std::min(l.nblocks, u1 * 4);
    for (int64_t m0 = 0; m0 < m; m0 += mc) {
      const int64_t m1 = std::min(m, m0 + mc);
      const int want = m1 - m0 == 1 || (vnni && !wide) ? 4 : wide_ymm ? 1 : 2;
      for (int64_t b = u0 * 4; b < b_end;) {
        const int blocks = int(std::min<int64_t>(want, b_end - b));
        for (int64_t r = m0; r < m1;) {
          const int rows = int(std::min<int64_t>(max_rows, m1 - r));
          detail::QTile t;
          const bool tall_tile = rows > detail::kQMaxRowsVnni;  // its x interleaved, in xtall
          t.x = (tall_tile ? xtall : base) + size_t(r * l.kpad * code_bytes);
          t.ldx = l.kpad;
          t.xscale = xscale + r * xs_per_row;
          t.xsum = xsum ? xsum + r * l.groups : nullptr;
          t.w = static_cast<const uint8_t*>(a.packed_w) + size_t(b) * l.block_bytes;
          t.layout = &l;
          t.out = a.out + r * a.ldo + b * kQBlockCols;
          t.ldo = a.ldo;
          t.bias = a.bias ? a.bias + b * kQBlockCols : nullptr;
          t.rows = rows;
          t.ncols = int(std::min<int64_t>(blocks * kQBlockCols, l.n - b * kQBlockCols));
          t.row_prefetch = row_prefetch;
          t.stream_nta = stream_nta;
          tile_for(l.scheme, rows, blocks)(t);
          r += rows;
        }
        b += blocks;
      }
    }
  };
  // One M block (decode): chunks of a few units, each thread's from a contiguous share first
  // (run_ranges, as the bf16 GEMM's decode; gemm.cpp): one weight stream a thread. Intel Xeon
  // (family 6 model 207, 2 threads, `nanovllm bench` 16 x (128 + 128), two alternated rounds):
  // decode phase int4 7.22 / 7.10 -> 7.03 / 6.77 s, int8 9.18 / 9.33 -> 8.85 / 9.07 s.
  if (m > mc)
    run_chunks(pool, units, chunk, body);
  else
    run_ranges(pool, units, chunk, body);
}

}  // namespace nanovllm::cpu
