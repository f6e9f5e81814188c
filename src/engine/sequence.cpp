#include "engine/sequence.h"

#include <utility>

#include "util/check.h"

namespace nanovllm {

Sequence::Sequence(int64_t seq_id, std::vector<int32_t> prompt, const ResolvedSampling& sampling,
                   int block_size)
    : seq_id(seq_id),
      token_ids(std::move(prompt)),
      last_token(0),
      num_prompt_tokens(int(token_ids.size())),
      sampling(sampling),
      block_size(block_size),
      request_id(seq_id) {
  if (token_ids.empty()) fail("request {}: the prompt is empty", seq_id);
  if (block_size <= 0) fail("block_size must be positive, got {}", block_size);
  last_token = token_ids.back();
}

std::vector<int32_t> Sequence::block(int i) const {
  NV_CHECK(i >= 0 && i < num_blocks(), "block {} of a sequence with {} blocks", i, num_blocks());
  auto begin = token_ids.begin() + ptrdiff_t(i) * block_size;
  auto end = i + 1 == num_blocks() ? token_ids.end() : begin + block_size;
  return {begin, end};
}

void Sequence::append_token(int32_t token_id) {
  token_ids.push_back(token_id);
  last_token = token_id;
}

}  // namespace nanovllm
