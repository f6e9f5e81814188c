#pragma once
// Added tokens (the file's "added_tokens"): found in the text before anything else and
// emitted as their own ids, the way Hugging Face's AddedVocabulary does it:
//  - tokens with normalized = false are matched on the raw text; the text between them is
//    normalized (NFC) and then searched for tokens with normalized = true, whose contents
//    were normalized the same way;
//  - matching is leftmost-longest, non-overlapping, over all tokens of one kind;
//  - single_word: the match is dropped when a word character (\w) touches either side;
//  - lstrip / rstrip: the match swallows the white space on its left / right;
//  - when special tokens are not parsed, a match of a special token is dropped (its text
//    stays plain text, and is not searched again for shorter tokens).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A piece of text: either an added token (id >= 0) or plain text (id == -1).
struct Segment {
  size_t begin = 0, end = 0;
  int32_t id = -1;
};

// Leftmost-longest matcher over one set of added tokens (a byte trie).
class AddedTokenMatcher {
 public:
  // `patterns[i]` is the text to find for tokens[i] (its content, or normalized content).
  AddedTokenMatcher(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns);

  // Splits `s` into segments covering it, in order.
  void split(std::string_view s, bool parse_special, std::vector<Segment>& out) const;
  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;
    int32_t token = -1;  // index into tokens_ of the pattern ending here
  };
  // Longest pattern starting at s[pos]: its token index and length, or -1.
  std::pair<int32_t, size_t> longest_at(std::string_view s, size_t pos) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
};

}  // namespace nanovllm
