// The arithmetic of `nanovllm perplexity` (src/eval/perplexity_stats.h) on known distributions:
// perplexity and its error, KL divergence (full and top-k plus rest), same top token, RMS delta p,
// and the --save-logits file (round trip, refusal of truncated or foreign files).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "eval/perplexity_stats.h"
#include <unistd.h>

#include "util/check.h"

namespace nanovllm::eval {
namespace {

// f() throws Error whose message holds `part`.
template <typename F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error (expected one with '" << part << "')";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

std::vector<float> logs(const std::vector<double>& p) {
  std::vector<float> out;
  for (double v : p) out.push_back(float(std::log(v)));
  return out;
}

TEST(PerplexityStats, UniformAndKnownValues) {
  PerplexityStats s;
  for (int i = 0; i < 10; ++i) s.add(std::log(0.25));  // always p = 1/4: PPL 4, no spread
  EXPECT_NEAR(s.ppl(), 4.0, 1e-12);
  EXPECT_NEAR(s.ppl_error(), 0.0, 1e-12);
  PerplexityStats t;  // NLLs 1 and 3: mean 2, population variance 1, SE = sqrt(1 / (2 - 1))
  t.add(-1.0);
  t.add(-3.0);
  EXPECT_NEAR(t.ppl(), std::exp(2.0), 1e-12);
  EXPECT_NEAR(t.ppl_error(), std::exp(2.0) * 1.0, 1e-12);
}

TEST(KldStats, FullDistributionsGiveTheExactSum) {
  const std::vector<double> p = {0.5, 0.25, 0.125, 0.125}, q = {0.25, 0.25, 0.25, 0.25};
  const double want = 0.5 * std::log(2.0) + 0 + 2 * 0.125 * std::log(0.5);  // sum p log(p / q)
  KldStats s;
  s.add(BaseDistribution::from_full(logs(p), /*token=*/1, /*k=*/0), logs(q), 1);
  s.add(BaseDistribution::from_full(logs(p), 0, 0), logs(p), 0);  // identical: 0
  ASSERT_EQ(s.klds.size(), 2u);
  EXPECT_NEAR(s.klds[0], want, 1e-6);
  EXPECT_NEAR(s.klds[1], 0.0, 1e-7);
  EXPECT_NEAR(s.mean(), want / 2, 1e-6);
  EXPECT_NEAR(s.max(), want, 1e-6);
  EXPECT_NEAR(s.quantile(0.5), want / 2, 1e-6);  // the midpoint of two values
  EXPECT_NEAR(s.mean_error(), want / 2, 1e-6);    // SE of {want, 0} = want / 2
  EXPECT_EQ(s.same_top, 2);  // q's argmax is token 0 (the lowest id of a tie), p's too; then p vs p
  // delta p of the next token: (0.25 - 0.25) and (0.5 - 0.5): 0.
  EXPECT_NEAR(s.rms_dp(), 0.0, 1e-7);
  EXPECT_NEAR(s.base.ppl(), std::exp(-(std::log(0.25) + std::log(0.5)) / 2), 1e-6);
}

TEST(KldStats, TopKPlusRestIsTheBucketedSum) {
  const std::vector<double> p = {0.6, 0.2, 0.1, 0.1}, q = {0.3, 0.3, 0.2, 0.2};
  // Top 2 of p (0.6, 0.2) and the rest 0.2 against q's same tokens (0.3, 0.3) and rest 0.4.
  const double want = 0.6 * std::log(0.6 / 0.3) + 0.2 * std::log(0.2 / 0.3) + 0.2 * std::log(0.2 / 0.4);
  const BaseDistribution b = BaseDistribution::from_full(logs(p), 2, 2);
  ASSERT_EQ(b.top_ids, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(std::exp(b.rest_logprob), 0.2, 1e-6);
  KldStats s;
  s.add(b, logs(q), 2);
  EXPECT_NEAR(s.klds[0], want, 1e-6);
  KldStats exact;  // the bucketed sum is a lower bound of the full one (log-sum inequality)
  exact.add(BaseDistribution::from_full(logs(p), 2, 0), logs(q), 2);
  EXPECT_LE(s.klds[0], exact.klds[0] + 1e-9);
  EXPECT_NEAR(s.rms_dp(), 0.2 - 0.1, 1e-6);  // p_cur(2) - p_base(2)
  EXPECT_EQ(s.same_top, 1);                    // q's argmax is 0 (tie with 1: lowest id), p's is 0
}

TEST(LogitsFile, RoundTripAndRefusals) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("nanovllm_logits_file_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  const std::string dir = d.string();
  const std::string path = dir + "/base.kld";
  LogitsFileHeader h{4, 6, 2, 2, 77};
  const std::vector<int32_t> tokens = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
  std::vector<BaseDistribution> written;
  {
    LogitsFileWriter w(path, h, tokens);
    for (int i = 0; i < 3; ++i) {
      written.push_back(BaseDistribution::from_full(logs({0.4, 0.3, 0.2, 0.1}), i, 2));
      w.write(written.back());
    }
    w.close();
  }
  LogitsFileReader r(path);
  EXPECT_EQ(r.header().vocab, 4u);
  EXPECT_EQ(r.header().fingerprint, 77u);
  EXPECT_EQ(r.tokens(), tokens);
  for (const BaseDistribution& want : written) {
    BaseDistribution got = r.next();
    EXPECT_EQ(got.top_ids, want.top_ids);
    EXPECT_EQ(got.top_logprobs, want.top_logprobs);
    EXPECT_EQ(got.rest_logprob, want.rest_logprob);
    EXPECT_EQ(got.token_logprob, want.token_logprob);
  }
  expect_error([&] { r.next(); }, "truncated or corrupt");
  std::ofstream(dir + "/text.kld") << "hello, not a logits file";
  expect_error([&] { LogitsFileReader x(dir + "/text.kld"); }, "not a file of `nanovllm perplexity --save-logits`");
  expect_error([&] { LogitsFileReader x(dir + "/missing.kld"); }, "cannot open");
  std::filesystem::resize_file(path, 8 + 16 + 8 + 10);  // cut inside the tokens
  expect_error([&] { LogitsFileReader x(path); }, "truncated");
}

}  // namespace
}  // namespace nanovllm::eval
