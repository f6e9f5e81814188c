#include "tokenizer/incremental_detokenizer.h"

namespace nanovllm {

std::string IncrementalDetokenizer::add(int32_t id) {
  std::string out;
  tokenizer_->decode_step(state_, id, skip_special_tokens_, out);
  return out;
}

std::string IncrementalDetokenizer::add(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) tokenizer_->decode_step(state_, id, skip_special_tokens_, out);
  return out;
}

std::string IncrementalDetokenizer::finish() {
  std::string out;
  state_.finish(out);
  return out;
}

}  // namespace nanovllm
