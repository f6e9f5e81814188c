#include "util/bench_workload.h"

#include "util/check.h"
#include "util/python_random.h"

namespace nanovllm {

BenchWorkload make_bench_workload(int num_seqs, int max_input_len, int max_output_len, int min_len,
                                  uint64_t seed) {
  if (num_seqs < 0) fail("bench: --num-seqs must be >= 0, got {}", num_seqs);
  if (min_len < 1) fail("bench: --min-len must be >= 1, got {}", min_len);
  if (max_input_len < min_len) {
    fail("bench: --max-input-len {} is below --min-len {}", max_input_len, min_len);
  }
  if (max_output_len < min_len) {
    fail("bench: --max-output-len {} is below --min-len {}", max_output_len, min_len);
  }
  PythonRandom rng(seed);
  BenchWorkload w;
  w.prompts.resize(size_t(num_seqs));
  for (auto& prompt : w.prompts) {
    prompt.resize(size_t(rng.randint(min_len, max_input_len)));  // range(...) is evaluated first
    for (int32_t& t : prompt) t = int32_t(rng.randint(0, 10000));
  }
  w.max_tokens.resize(size_t(num_seqs));
  for (int& m : w.max_tokens) m = int(rng.randint(min_len, max_output_len));
  return w;
}

void fold_into_vocabulary(BenchWorkload& w, int vocab_size) {
  if (vocab_size < 1) fail("bench: a vocabulary of {} ids", vocab_size);
  for (auto& prompt : w.prompts)
    for (int32_t& t : prompt) t %= vocab_size;
}

}  // namespace nanovllm
