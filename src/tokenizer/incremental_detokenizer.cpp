#include "tokenizer/incremental_detokenizer.h"

#include "tokenizer/utf8.h"

namespace nanovllm {

std::string IncrementalDetokenizer::drain(bool final_chunk) {
  std::string out;
  const size_t used = utf8::append_lossy(out, pending_, final_chunk);
  pending_.erase(0, used);
  return out;
}

std::string IncrementalDetokenizer::add(int32_t id) {
  if (const std::string* bytes = tokenizer_->token_bytes(id, skip_special_tokens_)) pending_ += *bytes;
  return drain(false);
}

std::string IncrementalDetokenizer::add(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    if (const std::string* bytes = tokenizer_->token_bytes(id, skip_special_tokens_)) pending_ += *bytes;
  }
  return drain(false);
}

std::string IncrementalDetokenizer::finish() { return drain(true); }

}  // namespace nanovllm
