#pragma once
// The CPU GEMM of quantized weights (runtime/quant.h): out[M, N] = x[M, K] @ w[N, K]^T (+ bias)
// with w int8 (a scale per output row or per group along K) or int4 (groups along K), x f32.
//
// x is quantized per row so that the dot products run on integers:
//   int8 weights: x to int16 (symmetric, scale max|x| / 16383 per row: 15 bits, far finer than
//     the bf16 the float GEMM rounds x to); vpmaddwd multiplies 16 int16 pairs into 8 int32
//     sums per instruction. On AVX2 that is the rate of an int8 x path (with 8-bit x, vpmaddubsw
//     needs |x| and the weights' signs flipped row by row, or 7-bit x), so 16 bits cost nothing.
//   int4 weights: x to int8 in each weight group (symmetric, scale max|x_group| / 127, as
//     llama.cpp's Q8_0 activations in blocks of 32), so that vpmaddubsw multiplies the unsigned
//     4-bit codes by the signed x codes, 32 products per instruction summed in int16 pairs;
//     up to 32 k of those sums stay in int16 (8 x 2 x 15 x 127 < 2^15), then vpmaddwd widens
//     them. About half the instructions of int16 x per product (docs/quantization.md).
// Integer sums are flushed to f32 per group (int4: per 32 k, then x scale * weight scale *
// (sum - zero * sum of x codes); int8: scale * sum, or for a per-row scale the sum of each
// chunk of kInt8Chunk k, the scale at the end), always in k order, so a row's result depends
// only on that row and the weights: batch and thread invariant.
//
// Packed layout: blocks of 8 output columns, each one contiguous stream over k; the weights of a
// block are kpad = k rounded up to 8, in groups of kg k (the scheme's group; int8 per row:
// kInt8Chunk), the last group shorter. Each group is a 32-byte header and its codes:
//   header: int8 per row: f32 scale[8] before the first group only; int8 grouped: f32 scale[8];
//           int4: f16 scale[8], f16 zero[8].
//   int8: per two k pairs p, p + 1: 32 bytes, 16-bit lane 2c + e holding pair p's (c, e) code
//         in its low byte and pair p + 1's in its high byte.
//   int4: per 8 k from k0: 32 bytes, byte 4c + i holding column c's code of k0 + i in its low
//         nibble and of k0 + 4 + i in its high one, so that a mask, and a shift and a mask, give
//         the two sets of 4 consecutive k per column that vpmaddubsw pairs with 4 x codes.
// Padding (columns past n, k past K) is code 0 with scale and zero 0.
#include <cstddef>
#include <cstdint>

#include "backend/cpu/gemm.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/thread_pool.h"
#include "runtime/quant.h"

namespace nanovllm::cpu {

constexpr int64_t kQBlockCols = 8;
// Largest groups whose int32 sums stay below 2^31 (x codes up to 16383): int8 128 * 16383 * 512
// < 2^30.1; int4 15 * 16383 * 4096 < 2^30.
constexpr int64_t kInt8Chunk = 512;
constexpr int64_t kInt4MaxGroup = 4096;

struct QuantLayout {
  QuantScheme scheme;
  int64_t n = 0, k = 0;
  int64_t kpad = 0;     // k rounded up to 8
  int64_t kg = 0;       // k per group
  int64_t groups = 0;   // ceil(kpad / kg)
  int64_t nblocks = 0;  // ceil(n / 8)
  size_t block_bytes = 0;
  size_t bytes() const { return block_bytes * size_t(nblocks); }
  int64_t group_len(int64_t g) const { return g + 1 < groups ? kg : kpad - g * kg; }
};
QuantLayout quant_layout(QuantScheme scheme, int64_t n, int64_t k);

// Packs blocks [b0, b1) of w into dst (layout.bytes(), 64-aligned): disjoint ranges may run on
// different threads.
void pack_quantized_blocks(void* dst, const QuantizedWeight& w, const QuantLayout& layout,
                           int64_t b0, int64_t b1);
// Row `row` of the dequantized [n, k] weight, as f32 (the embedding lookup).
void unpack_quantized_row(float* out, const void* packed, const QuantLayout& layout, int64_t row);

struct QGemmArgs {
  float* out;  // [m, n], row stride ldo
  int64_t ldo;
  const float* x;  // [m, k], row stride ldx
  int64_t ldx;
  const void* packed_w;
  const QuantLayout* layout;
  const uint16_t* bias;  // bf16 [n] or nullptr
  int64_t m;
  GemmScratch* scratch;  // the quantized x
};
// The tiles qgemm runs: AVX2 (vpmaddwd / vpmaddubsw on 8 columns), AVX-VNNI (the same tiles
// on the VEX vpdpwssd / vpdpbusd, qgemm_avxvnni.cpp), AVX-512 VNNI (vpdpwssd / vpdpbusd on
// 16 columns, qgemm_avx512.cpp), or AMX INT8 (tdpbssd / tdpbusd on 16 x 16 tiles for int8
// weights from kAmxMinRows rows on, qgemm_amx.cpp; the AVX-512 VNNI tiles for the rest); all
// give the same bits.
enum class QGemmIsa { AVX2, AVX_VNNI, AVX512_VNNI, AMX_INT8 };
// AMX_INT8 where the CPU and the OS offer it and want is auto or amx, else AVX512_VNNI where the
// CPU has AVX-512 F/BW/VL/DQ and VNNI and want allows AVX-512 (isa.h), else AVX_VNNI where it
// has AVX-VNNI and want is not AVX2, else AVX2. want AMX, AVX512 or AVXVNNI on a CPU without
// them throws Error.
QGemmIsa select_qgemm_isa(CpuIsa want);
const char* qgemm_isa_name(QGemmIsa isa);  // "avx2", "avx_vnni", "avx512_vnni", "amx_int8"

void qgemm(const QGemmArgs& args, ThreadPool& pool, QGemmIsa isa);

namespace detail {

// One register tile: out[rows, ncols] = x[rows] @ (the blocks from w)^T, whole k.
struct QTile {
  const void* x;  // quantized x of the tile's first row, [kpad] per row: int16 (int8
                  // weights) or int8 (int4 weights); tall tiles (rows > kQMaxRowsVnni):
                  // interleaved, [kpad * code bytes / 4][rows][4 bytes]
  int64_t ldx;    // elements between rows (not read by tall tiles)
  // int8 weights: per row, the scale of its quantized x (NaN: x was not finite). int4: per row
  // and group ([groups] per row), the scale of the group's x codes (NaN: x was not finite).
  const float* xscale;
  const float* xsum;    // int4: per row and group, the scale times the sum of the x codes
  const uint8_t* w;     // the tile's first block
  const QuantLayout* layout;
  float* out;
  int64_t ldo;
  const uint16_t* bias;  // bf16, at the tile's first column, or nullptr
  int rows;              // 1..kQMaxRows (AVX-512 VNNI with 2 blocks: 1..kQMaxRowsTall, tall
                         // from kQMaxRowsVnni + 1; AVX-VNNI int8 with 1 block: 1..kQMaxRowsAvxVnni)
  int ncols;             // 1..blocks * 8
  bool row_prefetch = true;  // one-row AVX-512 VNNI tiles: the near-ahead prefetch (kRowAheadBytes)
  bool stream_nta = false;   // AVX2 tiles: prefetchnta near ahead (kRowNtaAheadBytes)
};
constexpr int kQMaxRows = 4;
// The AVX-512 VNNI tiles of 2 blocks (one zmm of 16 columns) also take 5..8 rows: per 16 dot
// products an 8-row tile loads and widens its weights once where two 4-row tiles of 4 blocks
// do it twice (the int8 shifts share the two vector ports with vpdpwssd), and a block's
// weights are read by half as many row tiles.
constexpr int kQMaxRowsVnni = 8;
// Batches of more than kQMaxRowsVnni rows take tall AVX-512 VNNI tiles of up to 16 rows x 2
// blocks: each weight row loaded and widened (int8) or unpacked (int4) meets 16 x rows, and the
// f32 sums of each group go through a 1 KiB buffer of the tile's own (16 rows would need 32
// registers; the output rows themselves lie N floats apart, 4 KiB at N = 1,024, all in one set
// of the L1: the int4 tile flushing there ran 30% slower than two 8-row tiles). Their x is
// interleaved, [kpad * code bytes / 4][rows][4 bytes] (interleave_x_rows), so the 16 broadcasts
// of a step are 64 bytes at fixed offsets from one pointer (row-major, the int4 tile ran out of
// registers for the 16 row addresses). The same integer sums and the same f32 steps in the same
// order as the 8-row tiles: the same bits. Measured on an Intel Xeon (family 6 model 207, 2
// threads), a decode step's GEMMs of Qwen3-0.6B's shapes (28 layers, weights from memory,
// alternated in one process, best of 4-8): int8 at M = 16 with the int8 lm_head 50.2 -> 39.1
// ms, M = 64 130.7 -> 110.3; int4 M = 12 / 16 / 24 / 32 32.2 -> 26.4 / 25.8 -> 24.1 / 40.5 ->
// 36.4 / 43.2 -> 38.9 ms; 4 layers at M = 512: int8 186.7 -> 140.2, int4 even (103.3 / 103.0).
constexpr int kQMaxRowsTall = 16;
// The AVX-VNNI int8 tiles (int16 x on vpdpwssd ymm) take 5..8 rows of one block too: the three
// shifts that widen a 32-byte load of weights feed 16 vpdpwssd in an 8-row tile, 8 in a 4-row
// tile of 2 blocks. Measured on the Intel Xeon family 6 model 207 held to AVX2 + AVX-VNNI, 2
// threads, bench_gemm --quant int8 --avxvnni on the five qwen3-0.6b shapes at M = 16, 32, 64,
// two interleaved rounds, median G ops/s: 8 x 1 at 248 / 240, 4 x 2 at 179 / 166 (6 x 1: 194,
// 8 x 2: 195-198, 6 x 2: 175-189). int4 keeps 4 x 2 (406 / 400 against 382 / 379 for 8 x 1),
// and so do the AVX2 tiles: 8 x 1 ran 1.15x there, but a Zen 3 chose theirs.
constexpr int kQMaxRowsAvxVnni = 8;
// Software prefetch of both tile sets: each step touches the same place of the blocks
// kTilesAhead tiles on (the next tiles' blocks follow these in memory), so a thread's weight
// stream is requested two tiles before it is read. Measured on a Zen 3 at M = 1, 2 threads, 80 MiB of 3072 x 1024 weights:
// int4 23.7 -> 31.2 GB/s, int8 27.2 -> 33.4 (1 and 3 tiles ahead within 2%; a fixed 256-2048
// bytes ahead within each block, 1.0-1.15x: a 1-row tile's blocks are only K / 2 bytes long).
constexpr int kTilesAhead = 2;
// A one-row tile (decode of one sequence) of the AVX-512 VNNI and AVX-VNNI tiles, and every
// AVX-512 VNNI tile of up to kQMaxRows rows (batches of up to 4 rows), instead prefetches near
// ahead in each of its streams, as the bf16 GEMV does: two tiles ahead is 2 x 4 x 8 KiB and
// more, past the L1 by the time it is read. Measured on an Intel Xeon (family 6
// model 207, 2 threads, bench_gemm --quant, one row, interleaved rounds; GB/s of the five
// qwen3-0.6b shapes, median (min-max)): AVX-512 VNNI int8 with 4 blocks a tile and 1 KiB ahead
// 26.8 (23.0-28.9) against 23.6 (19.7-25.9) for 2 blocks two tiles ahead, six rounds (512 and
// 1,536 bytes within the noise of 1 KiB); int4 24.9 against 21.8, three rounds; AVX-VNNI int8
// 27.5 (24.3-29.1) against 22.3 (16.4-24.4), three rounds. At M = 4 (AVX-512 VNNI, three
// rounds): int8 22.7 against 20.1, int4 20.0 against 18.5; the 8-row tiles (M >= 5) keep two
// tiles ahead (near ahead at M = 8 was no better, its lm_head worse). The AVX2 tiles keep
// two tiles ahead, the best on the Zen 3 they run on (near ahead there: 1.0-1.15x of no
// prefetch, two tiles ahead 1.2-1.3x).
constexpr int64_t kRowAheadBytes = 1024;
// On a first-generation Zen or Zen+ (cpu_is_zen1: AVX2 on 128-bit units) every AVX2 tile instead
// prefetches near ahead in each of its streams, this far, with prefetchnta (QTile::stream_nta),
// as the bf16 GEMV's one- and two-row AVX2 tiles do (gemm_internal.h, kStreamOnceAheadBytes).
// Measured on one (family 23 model 1, 2 threads, alternated runs of scratch drivers): one row
// over 14 MB of weights, int4 19.1-19.2 GB/s against 12.7-13.4 (K = 1,024) and 17.2-19.8 against
// 10.3-11.8 (K = 3,072), int8 19.9-20.2 against 15.9-16.0 and 20.3-22.3 against 12.6-13.4; a
// qwen3-0.6b decode step's GEMVs in place (int4 linears 0.25 GB, int8 lm_head 0.16 GB) 24.2-27.3
// ms against 31.3-41.3, the int8 ones (0.6 GB) 30.4-30.8 against 63.8-70.3; 256 / 512 / 1,024
// bytes ahead 16.2-17.9 / 17.5-18.8 / 18.6-19.5 ms for the int4 linears. Batches gain too: the
// int8 linears at M = 2 / 4 / 16 / 64 / 512 took 0.67-0.68 / 0.75-0.84 / 0.78-0.79 / 0.79-0.80 /
// 0.80-0.81x the time, the int4 ones 0.85-1.01x (even at M = 4, where the int8 lm_head ran 2-9%
// slower); at M = 16 prefetcht0 as near did as well as prefetchnta, at M = 1 4-10% worse.
// Other CPUs keep the far prefetch: on the Zen 3 it was chosen on, near ahead (then without
// ahead_of's step into the next tile, so each stream started cold) ran 1.0-1.15x of no prefetch,
// far 1.2-1.3x.
constexpr int64_t kRowNtaAheadBytes = 512;
// Bytes ahead of the read position that a tile of `blocks` blocks prefetches: kRowAheadBytes
// where `near`, else kTilesAhead tiles.
inline size_t prefetch_ahead(bool near, int blocks, size_t block_bytes) {
  return near ? size_t(kRowAheadBytes) : size_t(kTilesAhead) * size_t(blocks) * block_bytes;
}
// Where a stream of a tile of `blocks` blocks prefetches from byte `pos` of its block: `ahead`
// bytes on; near ahead, a place past the block's end is the same place of the same stream in the
// next tile (whose blocks follow this tile's), not the tile's next block, which another stream is
// reading already. A lone row's block is short (int8: K bytes + a header, 8 KiB at K = 1,024;
// int4 half that), so each stream used to start cold. Measured on a Xeon with AMX (family 6
// model 167, 2 threads, bench_gemm --quant, M = 1, two interleaved rounds, GB/s of the best run):
// int8 lm_head 27.1-27.3 against 26.1-26.4, qkv 27.7-28.0 against 26.7-27.2, M = 4 qkv 25.9-26.0
// against 23.5-23.6; int4 lm_head 27.0-27.5 against 23.7-24.0, gate_up 26.7-26.9 against
// 24.1-24.6; AVX-VNNI int8 lm_head 26.8-27.4 against 25.0-25.5. The int8 decode of one
// qwen3-0.6b sequence: 24.7-25.3 ms a token against 26.3-27.9 (three interleaved runs).
// On AMD (a Zen 4, family 25 model 17, 2 threads) a one-row AVX-512 VNNI tile runs without it
// (QTile::row_prefetch): the int8 GEMVs of a qwen3-0.6b decode step (0.60 GB, alternated in one
// process, two runs of 12 and 8 rounds) took medians of 19.9 and 20.1 ms against 21.6 and 21.7
// with it, faster in 17 of 20 rounds; int4 even (faster in 4 of 8); M = 2 even (5 of 8), M = 4
// slower without (0 of 8), so only one-row tiles drop it.
inline const char* ahead_of(const uint8_t* stream, size_t pos, size_t ahead, bool near, int blocks,
                            size_t block_bytes) {
  pos += ahead;
  if (near && pos >= block_bytes) pos += size_t(blocks - 1) * block_bytes;
  return reinterpret_cast<const char*>(stream + pos);
}
constexpr int kQMaxBlocks = 4;
// The AMX INT8 tiles (qgemm_amx.cpp) take int8 weights (per row, or groups of a multiple of 64
// k) in batches of kAmxMinRows rows and more, 16 rows x 2 blocks a tile. Measured on a 2-core
// Xeon with AMX (bench_gemm --quant int8 against --avx512, qwen3-0.6b shapes, ms): M = 8 qkv
// 0.23-0.24 against the AVX-512 VNNI tiles' 0.20; M = 16 0.24-0.25 against 0.33, M = 32 0.33
// against 0.60, M = 512 2.9 against 8.7.
constexpr int64_t kAmxMinRows = 16;
// From this many rows the AMX INT8 tiles are 16 rows x 4 blocks on 16-column B tiles
// (amx_qtile8_wide): half the tile instructions for the same sums, and a copy of each unit's
// weights per M block. Measured on the same machine (bench_gemm --quant int8, two rounds, ms):
// M = 512 qkv 2.60 against 3.05-3.19, o_proj 1.52-1.55 against 1.67-1.68, M = 64 qkv 0.41-0.42
// against 0.51-0.65; M = 32 qkv 0.29-0.30 against 0.33-0.41, o_proj even; M = 16 5-10% slower
// (o_proj 0.13 against 0.12). 512-token prefill of the qwen3-0.6b preset: 0.64-0.73 s against
// 0.85-0.88.
constexpr int64_t kAmxWideRows = 32;
struct AmxQTile {
  // The x codes of the tile's 16 rows (zero past the batch) split in two planes (amx_x_planes):
  // per 64 k, a 16 x 64-byte A tile of the high bytes, then one of the low bytes.
  const uint8_t* x;
  const float* xscale;  // per row, as QTile's
  const uint8_t* w;     // the tile's first block
  const QuantLayout* layout;
  float* out;
  int64_t ldo;
  const uint16_t* bias;  // bf16, at the tile's first column, or nullptr
  int rows;              // 1..16
  int ncols;             // 1..16 (amx_qtile8_wide: 1..32)
  // amx_qtile8_wide: the 16-column B tiles of the tile's blocks 0-1 (b) and 2-3 (b + pair_bytes),
  // amx_pair_tiles' layout.
  const uint8_t* b = nullptr;
  size_t pair_bytes = 0;
};
// Whether the AMX INT8 tiles take weights of layout l (int8, per row or in groups of a multiple
// of 64 k: a B tile of 64 k must not straddle a group's header).
bool amx_qgemm8_supports(const QuantLayout& l);
int64_t amx_plane_k(const QuantLayout& l);  // k of a plane row: kpad rounded up to 64
// Row `row` of int16 codes [kpad] -> its high (code >> 8, signed) and low (code & 255) bytes in
// `planes` ([ceil(m/16)][kp/64][2][16][64] bytes), in the packed weights' k order within each
// 4 k, zero past kpad.
void amx_x_planes(const int16_t* q, int64_t kpad, int64_t kp, int64_t row, uint8_t* planes);
void amx_qtile8(const AmxQTile& t);
// Blocks w0 and w1 (8 columns each) side by side as 16-column B tiles, [steps][16][64] bytes:
// every group starts a step of 64 k, its last step zero-padded. amx_pair_tiles_bytes: their size.
size_t amx_pair_tiles_bytes(const QuantLayout& l);
void amx_pair_tiles(const QuantLayout& l, const uint8_t* w0, const uint8_t* w1, uint8_t* dst);
// 16 rows x 4 blocks on full-width tiles (t.b: amx_pair_tiles of blocks 0-1 and 2-3): half the
// tile instructions of amx_qtile8 for the same sums, the same bits.
void amx_qtile8_wide(const AmxQTile& t);
// x row [0, k) to the codes the tiles read, padded with zeros to kpad (AVX2): for int8 weights
// int16 codes of scale max|x| / 16383 (*xscale); for int4 weights int8 codes in each group g of
// scale xscale[g] = max|x_group| / 127, with xsum[g] = xscale[g] * the sum of its codes. Codes
// round to nearest even (std::nearbyint's). A row with a value that is not finite gets scale(s)
// NaN: its outputs are NaN, as in the float GEMM.
void quantize_x_i16(const float* x, int64_t k, const QuantLayout& l, int16_t* q, float* xscale);
void quantize_x_i8(const float* x, int64_t k, const QuantLayout& l, int8_t* q, float* xscale,
                   float* xsum);
// The AVX2 tile for `rows` rows and `blocks` blocks of 8 columns; the same on AVX-VNNI.
using QTileFn = void (*)(const QTile&);
QTileFn avx2_qtile(QuantScheme scheme, int rows, int blocks);
QTileFn avxvnni_qtile(QuantScheme scheme, int rows, int blocks);
// The AVX-512 VNNI tile for `rows` rows and `blocks` blocks (in pairs: 1-2 blocks, or 3-4).
QTileFn avx512_qtile(QuantScheme scheme, int rows, int blocks);
// The tall tiles' x: columns [c0, c1) of 4 bytes of `rows` rows of codes, row-major at src
// (row_bytes apart), to dst as [row_bytes / 4][rows][4 bytes].
void interleave_x_rows(uint8_t* dst, const uint8_t* src, int64_t row_bytes, int rows, int64_t c0,
                       int64_t c1);

}  // namespace detail
}  // namespace nanovllm::cpu
