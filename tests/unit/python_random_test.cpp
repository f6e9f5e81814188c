// PythonRandom and the bench workload against values computed with CPython 3.11's random module:
//   r = random.Random(seed); [r.random() for _ in range(3)]; [r.randint(0, 10000) for _ in
//   range(3)]; [r.getrandbits(k) for k in (1, 7, 32, 33, 64)]; [r.randint(5, 5) for _ in
//   range(2)]; r.random()
#include "util/python_random.h"

#include <cstdint>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "util/bench_workload.h"
#include "util/check.h"

namespace nanovllm {
namespace {

struct Expected {
  uint64_t seed;
  double random[3];
  int64_t randint[3];
  uint64_t bits[5];  // getrandbits(1), (7), (32), (33), (64)
  double random_after;
};

const Expected kExpected[] = {
    {0,
     {0.8444218515250481, 0.7579544029403025, 0.420571580830845},
     {4242, 8376, 7961},
     {0, 117, 3366389305ull, 3564191072ull, 8791662011684601223ull},
     0.5046868558173903},
    {1,
     {0.13436424411240122, 0.8474337369372327, 0.763774618976614},
     {4179, 1931, 8117},
     {1, 57, 2028277857ull, 2798570523ull, 3872982626502034966ull},
     0.02834747652200631},
    {42,
     {0.6394267984578837, 0.025010755222666936, 0.27502931836911926},
     {3657, 2286, 1679},
     {1, 94, 3831882064ull, 2342331444ull, 7783083932390163561ull},
     0.09369523986159245},
    {4294967301ull,  // 2**32 + 5: two key words
     {0.15727238718789782, 0.2824866316461999, 0.6044540318498407},
     {237, 5817, 2806},
     {1, 121, 3989798218ull, 7841284087ull, 9145418620838732424ull},
     0.3147820661442504},
    {18446744073709551615ull,  // 2**64 - 1
     {0.021825695401270107, 0.3380953268613758, 0.21196748656082065},
     {1556, 6079, 890},
     {1, 24, 3135196578ull, 2286593340ull, 16206507732152259700ull},
     0.4834155459860584},
};

TEST(PythonRandom, MatchesCPython) {
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.seed);
    PythonRandom r(e.seed);
    for (double v : e.random) EXPECT_EQ(r.random(), v);  // bit-exact
    for (int64_t v : e.randint) EXPECT_EQ(r.randint(0, 10000), v);
    const int ks[5] = {1, 7, 32, 33, 64};
    for (int i = 0; i < 5; ++i) EXPECT_EQ(r.getrandbits(ks[i]), e.bits[i]) << "k=" << ks[i];
    EXPECT_EQ(r.randint(5, 5), 5);  // randbelow(1) still draws a word, as CPython does
    EXPECT_EQ(r.randint(5, 5), 5);
    EXPECT_EQ(r.random(), e.random_after);
  }
}

TEST(PythonRandom, ReseedRestarts) {
  PythonRandom r(7);
  double first = r.random();
  r.random();
  r.seed(7);
  EXPECT_EQ(r.random(), first);
  EXPECT_EQ(r.getrandbits(0), 0u);
}

int64_t total_prompt_tokens(const BenchWorkload& w) {
  int64_t n = 0;
  for (const auto& p : w.prompts) n += int64_t(p.size());
  return n;
}

int64_t total_output_tokens(const BenchWorkload& w) {
  return std::accumulate(w.max_tokens.begin(), w.max_tokens.end(), int64_t(0));
}

TEST(BenchWorkload, MatchesNanoVllmBenchPy) {
  BenchWorkload w = make_bench_workload(256, 1024, 1024, 100, 0);
  ASSERT_EQ(w.prompts.size(), 256u);
  ASSERT_EQ(w.max_tokens.size(), 256u);
  EXPECT_EQ(total_prompt_tokens(w), 142827);
  EXPECT_EQ(total_output_tokens(w), 133966);
  EXPECT_EQ(w.prompts[0].size(), 964u);
  EXPECT_EQ(w.prompts[0][0], 6311);
  EXPECT_EQ(w.prompts[0][4], 8376);
  EXPECT_EQ(w.prompts[255].size(), 251u);
  EXPECT_EQ(w.prompts[255].back(), 1958);
  EXPECT_EQ(w.max_tokens[0], 845);
  EXPECT_EQ(w.max_tokens[4], 500);
}

TEST(BenchWorkload, SmallConfig) {
  // --num-seqs 16 --max-input-len 256 --max-output-len 256 --min-len 64 --seed 0
  BenchWorkload w = make_bench_workload(16, 256, 256, 64, 0);
  EXPECT_EQ(total_prompt_tokens(w), 2528);
  EXPECT_EQ(total_output_tokens(w), 2437);
  const size_t lens[16] = {162, 79, 218, 87, 74, 205, 198, 251, 134, 226, 103, 122, 131, 238, 171, 129};
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(w.prompts[i].size(), lens[i]) << i;
  EXPECT_EQ(w.prompts[0][0], 6890);
  EXPECT_EQ(w.max_tokens[0], 228);
  EXPECT_EQ(w.max_tokens[4], 86);
}

TEST(BenchWorkload, FoldsIntoASmallVocabularyOnly) {
  BenchWorkload w = make_bench_workload(16, 256, 256, 64, 0);
  const BenchWorkload drawn = w;
  fold_into_vocabulary(w, 151936);  // a real vocabulary: bench.py's ids, untouched
  EXPECT_EQ(w.prompts, drawn.prompts);
  fold_into_vocabulary(w, 512);
  EXPECT_EQ(w.prompts[0][0], 6890 % 512);
  EXPECT_EQ(w.max_tokens, drawn.max_tokens);
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    ASSERT_EQ(w.prompts[i].size(), drawn.prompts[i].size());
    for (size_t j = 0; j < w.prompts[i].size(); ++j) EXPECT_EQ(w.prompts[i][j], drawn.prompts[i][j] % 512);
  }
  EXPECT_THROW(fold_into_vocabulary(w, 0), Error);
}

TEST(BenchWorkload, RejectsBadLengths) {
  EXPECT_THROW(make_bench_workload(4, 10, 10, 0, 0), Error);
  EXPECT_THROW(make_bench_workload(4, 10, 100, 20, 0), Error);
  EXPECT_THROW(make_bench_workload(4, 100, 10, 20, 0), Error);
  EXPECT_THROW(make_bench_workload(-1, 100, 100, 20, 0), Error);
  EXPECT_TRUE(make_bench_workload(0, 100, 100, 20, 0).prompts.empty());
}

}  // namespace
}  // namespace nanovllm
