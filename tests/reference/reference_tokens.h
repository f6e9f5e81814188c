#pragma once
// Greedy tokens against the reference forward with genuine near-ties allowed (the CUDA engine
// computes in bf16, so a prompt may leave the reference's path only where the reference's own
// top-2 gap is tiny). Shared by the CUDA engine, tensor-parallel and quantized-weight tests.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "reference/reference_model.h"

namespace nanovllm::test {

// Every prompt matches the reference's greedy tokens in full or first differs where the
// reference's own top-2 gap is below `tie` of the largest |logit|; at least min_identical match.
inline void expect_reference_tokens(const std::vector<std::vector<int32_t>>& got,
                                    const std::vector<std::vector<int32_t>>& prompts,
                                    const ref::ReferenceModel& reference, int n, double tie,
                                    size_t min_identical, const char* what) {
  ASSERT_EQ(got.size(), prompts.size());
  size_t identical = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<double> gaps;
    std::vector<int32_t> want = reference.greedy(prompts[i], n, &gaps);
    ASSERT_EQ(got[i].size(), want.size()) << what;
    size_t first = 0;
    while (first < want.size() && got[i][first] == want[first]) ++first;
    if (first == want.size()) {
      ++identical;
    } else {
      EXPECT_LT(gaps[first], tie) << what << ": prompt " << i << " differs at step " << first
                                  << " where the reference has no tie";
    }
  }
  EXPECT_GE(identical, min_identical) << what << ": of " << prompts.size() << " prompts";
  std::printf("%s: %zu of %zu prompts identical for %d greedy tokens\n", what, identical,
              prompts.size(), n);
}

}  // namespace nanovllm::test
