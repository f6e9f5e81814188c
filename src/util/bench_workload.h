#pragma once
// nano-vllm's bench.py workload, reproduced with CPython's random module.
#include <cstdint>
#include <vector>

namespace nanovllm {

struct BenchWorkload {
  std::vector<std::vector<int32_t>> prompts;  // [num_seqs][randint(min_len, max_input_len)]
  std::vector<int> max_tokens;                // [num_seqs] randint(min_len, max_output_len)
};

// As bench.py: random.seed(seed);
//   prompts = [[randint(0, 10000) for _ in range(randint(min_len, max_input_len))]
//              for _ in range(num_seqs)]
//   max_tokens = [randint(min_len, max_output_len) for _ in range(num_seqs)]
// bench.py's defaults (256, 1024, 1024, 100, 0) give 142,827 prompt and 133,966 output tokens.
// Throws nanovllm::Error when num_seqs < 0, min_len < 1 or min_len exceeds a max length.
BenchWorkload make_bench_workload(int num_seqs, int max_input_len, int max_output_len, int min_len,
                                  uint64_t seed);

// For a model whose vocabulary has vocab_size <= 10000 ids (bench.py would fail on it): each
// prompt id t becomes t % vocab_size, so the same lengths run on a tiny test model. Larger
// vocabularies are left exactly as bench.py draws them.
void fold_into_vocabulary(BenchWorkload& w, int vocab_size);

}  // namespace nanovllm
