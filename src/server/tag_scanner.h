#pragma once
// Helpers of the streaming output parsers: find a tag in text that arrives in pieces, holding back
// only a tail that could still become the tag.
#include <string>
#include <string_view>

namespace nanovllm::server {

// Length of the longest suffix of `text` that is a proper prefix of `tag` (0 if none).
inline size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace nanovllm::server
