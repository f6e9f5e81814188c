#pragma once
// SamplingParams::prompt_logprobs of LLM::generate outputs against the reference forward's
// log-softmax at every prompt position (shared by the CPU and CUDA engine tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "nanovllm/llm.h"
#include "reference/reference_model.h"

namespace nanovllm::test {

// log_softmax in double.
inline std::vector<double> log_softmax(const std::vector<float>& x) {
  double m = *std::max_element(x.begin(), x.end()), z = 0;
  for (float v : x) z += std::exp(double(v) - m);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = double(x[i]) - m - std::log(z);
  return out;
}

// Every entry against the reference's log-softmax; returns the largest error / |logit| scale.
// tol: the bound on each logprob's error, as a fraction of the position's largest |logit| (at
// least 1).
inline double check_prompt_logprobs(const std::vector<GenerationOutput>& outs,
                                    const std::vector<std::vector<int32_t>>& prompts,
                                    const ref::ReferenceModel& reference, int top, double rel_tol) {
  double worst = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const auto& prompt = prompts[i];
    const std::vector<StepLogprobs>& got = outs[i].prompt_logprobs;
    EXPECT_EQ(got.size(), prompt.size() - 1);
    if (got.size() != prompt.size() - 1) continue;
    const std::vector<std::vector<float>> logits = reference.all_logits(prompt);
    for (size_t p = 0; p + 1 < prompt.size(); ++p) {
      const std::vector<double> want = log_softmax(logits[p]);
      double scale = 1;  // tolerance scaled with the logits' magnitude
      for (float v : logits[p]) scale = std::max(scale, double(std::fabs(v)));
      const double tol = rel_tol * scale;
      const StepLogprobs& lp = got[p];
      const int32_t token = prompt[p + 1];
      EXPECT_EQ(lp.sampled.token_id, token);
      const double err = std::fabs(lp.sampled.logprob - want[size_t(token)]);
      worst = std::max(worst, err / scale);
      EXPECT_LT(err, tol) << "position " << p;
      // Rank: 1 + the tokens the reference puts clearly above it (near-ties may go either way).
      int above = 0, near = 0;
      for (double w : want) {
        if (w > want[size_t(token)] + tol) ++above;
        else if (w > want[size_t(token)] - tol) ++near;
      }
      EXPECT_GE(lp.rank, above + 1) << "position " << p;
      EXPECT_LE(lp.rank, above + near) << "position " << p;
      EXPECT_EQ(int(lp.top.size()), top) << "position " << p;
      for (size_t k = 0; k < lp.top.size(); ++k) {
        EXPECT_NEAR(lp.top[k].logprob, want[size_t(lp.top[k].token_id)], tol);
        if (k > 0) {
          EXPECT_GE(lp.top[k - 1].logprob, lp.top[k].logprob);
        }
      }
      if (!lp.top.empty()) {
        EXPECT_NEAR(lp.top[0].logprob, *std::max_element(want.begin(), want.end()), tol);
      }
    }
  }
  return worst;
}

}  // namespace nanovllm::test
