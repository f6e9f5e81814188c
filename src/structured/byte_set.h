#pragma once
// A set of bytes (256 bits): the terminal of the byte-level grammar.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace nanovllm::structured {

struct ByteSet {
  std::array<uint64_t, 4> bits{};

  static ByteSet range(uint8_t lo, uint8_t hi) {  // [lo, hi], empty if lo > hi
    ByteSet s;
    for (int b = lo; b <= hi; ++b) s.insert(uint8_t(b));
    return s;
  }
  static ByteSet single(uint8_t b) { return range(b, b); }
  void insert(uint8_t b) { bits[b >> 6] |= uint64_t(1) << (b & 63); }
  bool contains(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
};

struct ByteSetHash {
  size_t operator()(const ByteSet& s) const {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint64_t w : s.bits) h = (h ^ w) * 0xff51afd7ed558ccdull;
    return size_t(h ^ (h >> 32));
  }
};

}  // namespace nanovllm::structured
