// Backend::vocab_parallel_embedding on the CPU backend against the plain fp32 reference
// (ref::vocab_parallel_embedding over the whole table): each rank of tp = 1, 2, 4 holds vocab rows
// [r V/tp, (r+1) V/tp) of a bf16 table; ids in its range give their row, every other id (the
// boundary ids start - 1 and start + rows included) a zero row written over a NaN-poisoned,
// strided output; the ranks' outputs sum to the plain embedding of the whole table, exactly.
// Also the CUDA kernel's row rule (cuda/device_math.h: vocab_slice_row) at the same boundaries.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/device_math.h"
#include "reference/ops_reference.h"

namespace nanovllm {
namespace {

using ref::Vec;

constexpr int64_t kVocab = 40, kHidden = 72, kPad = 8;  // 40 / 4 = 10 rows: not a multiple of 16

struct Table {
  Vec values;                  // f32 [V, H], bf16-exact
  std::vector<uint16_t> bits;  // bf16 [V, H]
};

Table random_table(std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Table t;
  for (int64_t i = 0; i < kVocab * kHidden; ++i) {
    float x = 0.0f;
    while (x == 0.0f) x = ref::round_bf16(dist(rng));
    t.values.push_back(x);
    t.bits.push_back(f32_to_bf16(x));
  }
  return t;
}

// Rank `rank` of `tp`: its [V/tp, H] slice as the backend's weight.
LinearWeight slice(Backend& be, Table& t, int tp, int rank) {
  const int64_t rows = kVocab / tp;
  uint16_t* first = t.bits.data() + rank * rows * kHidden;
  return be.make_linear_weight(Tensor::contiguous(first, DType::BF16, {rows, kHidden}));
}

// ids: the boundaries of every rank's range (start - 1, start, start + rows - 1, start + rows),
// 0, V - 1, then random ids up to `count`.
std::vector<int32_t> test_ids(std::mt19937& rng, int tp, size_t count) {
  std::vector<int32_t> ids = {0, int32_t(kVocab - 1)};
  const int64_t rows = kVocab / tp;
  for (int r = 0; r < tp; ++r) {
    const int64_t start = r * rows;
    for (int64_t id : {start - 1, start, start + rows - 1, start + rows})
      if (id >= 0 && id < kVocab) ids.push_back(int32_t(id));
  }
  while (ids.size() < count) ids.push_back(int32_t(rng() % kVocab));
  return ids;
}

// The lookup into the first kHidden columns of a NaN-filled [T, kHidden + kPad] buffer; returns
// those columns (a row the op did not write stays NaN and fails the comparison).
Vec lookup(Backend& be, const std::vector<int32_t>& ids, const LinearWeight& w, int64_t start) {
  const int64_t T = int64_t(ids.size());
  Vec buf(size_t(T * (kHidden + kPad)), std::numeric_limits<float>::quiet_NaN());
  Tensor out =
      Tensor::contiguous(buf.data(), DType::F32, {T, kHidden + kPad}).slice_last(0, kHidden);
  be.vocab_parallel_embedding(
      out, Tensor::contiguous(const_cast<int32_t*>(ids.data()), DType::I32, {T}), w, start);
  Vec got;
  for (int64_t t = 0; t < T; ++t)
    got.insert(got.end(), buf.begin() + t * (kHidden + kPad),
               buf.begin() + t * (kHidden + kPad) + kHidden);
  return got;
}

TEST(VocabParallelEmbedding, RanksMatchTheReferenceAndSumToTheWholeTable) {
  std::mt19937 rng(7);
  auto be = make_backend({.device = "cpu", .num_threads = 2, .device_index = 0});
  Table table = random_table(rng);
  for (int tp : {1, 2, 4}) {
    const int64_t rows = kVocab / tp;
    // 600 tokens x 72 columns passes the CPU backend's threshold for splitting over its pool.
    for (size_t count : {size_t(17), size_t(600)}) {
      const std::vector<int32_t> ids = test_ids(rng, tp, count);
      Vec sum(ids.size() * size_t(kHidden), 0.0f);
      for (int r = 0; r < tp; ++r) {
        const LinearWeight w = slice(*be, table, tp, r);
        ASSERT_EQ(w.n, rows);
        const Vec got = lookup(*be, ids, w, r * rows);
        const Vec want = ref::vocab_parallel_embedding(ids, table.values, kHidden, r * rows, rows);
        ASSERT_EQ(got.size(), want.size());
        int bad = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          if (got[i] != want[i] && ++bad <= 5) {  // a copy or a zero: exact
            ADD_FAILURE() << "tp " << tp << " rank " << r << " token " << i / kHidden << " (id "
                          << ids[i / kHidden] << ") col " << i % kHidden << ": got " << got[i]
                          << ", want " << want[i];
          }
          sum[i] += got[i];
        }
        EXPECT_EQ(bad, 0) << "tp " << tp << " rank " << r;
        // The boundary ids: start - 1 and start + rows give zero rows, start and start + rows - 1
        // their own rows.
        for (size_t t = 0; t < ids.size(); ++t) {
          const bool mine = ids[t] >= r * rows && ids[t] < (r + 1) * rows;
          const float first = got[t * size_t(kHidden)];
          EXPECT_EQ(first != 0.0f, mine) << "tp " << tp << " rank " << r << " id " << ids[t];
        }
      }
      EXPECT_EQ(sum, ref::embedding(ids, table.values, kHidden))
          << "tp " << tp << ": sum over ranks";
    }
  }
}

// An id outside the rank's range but inside the vocabulary, or past it, is another rank's row
// (zeros); a negative id is never a token: an internal error, as in embedding().
TEST(VocabParallelEmbedding, NegativeIdIsAnErrorAndIdsPastTheSliceGiveZeros) {
  std::mt19937 rng(8);
  auto be = make_backend({.device = "cpu", .num_threads = 1, .device_index = 0});
  Table table = random_table(rng);
  const LinearWeight w = slice(*be, table, 4, 3);  // rows [30, 40)
  const Vec got = lookup(*be, {29, 40, 1000, 30, 39}, w, 30);
  for (int64_t t = 0; t < 5; ++t) {
    for (int64_t j = 0; j < kHidden; ++j) {
      const float want = t < 3 ? 0.0f : table.values[size_t((t == 3 ? 30 : 39) * kHidden + j)];
      ASSERT_EQ(got[size_t(t * kHidden + j)], want) << "token " << t << " col " << j;
    }
  }
  EXPECT_ANY_THROW(lookup(*be, {31, -1}, w, 30));
}

// The row rule the CUDA kernel runs (plain C++ here): the row, or -1 for another rank's id.
TEST(VocabParallelEmbedding, CudaRowRuleAtTheBoundaries) {
  const int64_t start = 1000, rows = 250;
  EXPECT_EQ(cuda::vocab_slice_row(int32_t(start - 1), start, rows), -1);
  EXPECT_EQ(cuda::vocab_slice_row(int32_t(start), start, rows), 0);
  EXPECT_EQ(cuda::vocab_slice_row(int32_t(start + rows - 1), start, rows), rows - 1);
  EXPECT_EQ(cuda::vocab_slice_row(int32_t(start + rows), start, rows), -1);
  EXPECT_EQ(cuda::vocab_slice_row(-1, 0, rows), -1);
  EXPECT_EQ(cuda::vocab_slice_row(0, 0, rows), 0);
  EXPECT_EQ(cuda::vocab_slice_row(2147483647, 0, int64_t(1) << 32), 2147483647);  // no overflow
}

}  // namespace
}  // namespace nanovllm
