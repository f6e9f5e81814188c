#pragma once
// Sets of Unicode code points (what GBNF / regex character classes denote) and their UTF-8 form.
// Surrogates (U+D800..U+DFFF) are not code points one can write in UTF-8: complements and "any
// character" leave them out, and utf8_sequences never encodes them.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm::structured {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct CodePointRange {
  uint32_t lo = 0, hi = 0;  // inclusive
  bool operator==(const CodePointRange&) const = default;
};

// A set of code points: sorted, disjoint, non-adjacent ranges (normalize() makes any list so).
class CodePointSet {
 public:
  CodePointSet() = default;
  explicit CodePointSet(std::vector<CodePointRange> ranges);  // any order / overlap
  static CodePointSet any();                                  // every code point but the surrogates

  void add(uint32_t lo, uint32_t hi);  // [lo, hi]; lo <= hi <= kMaxCodePoint
  void add(const CodePointSet& other);
  CodePointSet complement() const;  // any() minus this
  CodePointSet minus(const CodePointSet& other) const;
  bool contains(uint32_t cp) const;
  bool empty() const { return ranges_.empty(); }
  bool ascii_only() const { return ranges_.empty() || ranges_.back().hi < 0x80; }
  const std::vector<CodePointRange>& ranges() const { return ranges_; }
  bool operator==(const CodePointSet&) const = default;

 private:
  void normalize();
  std::vector<CodePointRange> ranges_;
};

// One UTF-8 byte position of a sequence: a byte in [lo, hi].
struct ByteRange {
  uint8_t lo = 0, hi = 0;
  bool operator==(const ByteRange&) const = default;
};

// The UTF-8 encodings of `set` as sequences of byte ranges: a byte string is the encoding of a
// code point of the set iff it matches exactly one of the sequences. Surrogates are left out.
std::vector<std::vector<ByteRange>> utf8_sequences(const CodePointSet& set);

// Appends the UTF-8 encoding of `cp` (<= kMaxCodePoint) to `out`.
void append_utf8(uint32_t cp, std::string& out);

// Decodes one code point of valid UTF-8 at text[pos], advancing pos; returns -1 (pos unchanged)
// if the bytes there are not valid UTF-8 (overlong forms, surrogates, truncation included).
int32_t decode_utf8(std::string_view text, size_t& pos);

}  // namespace nanovllm::structured
