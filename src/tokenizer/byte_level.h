#pragma once
// The GPT-2 byte-level alphabet: every byte maps to one printable code point, so any byte
// string becomes a string of "visible" characters that BPE vocabularies are written in
// (a space is 'Ġ' U+0120, a newline 'Ċ' U+010A).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace nanovllm {

class ByteLevel {
 public:
  // The table as GPT-2 defines it: bytes 0x21..0x7E, 0xA1..0xAC and 0xAE..0xFF map to
  // themselves; the other 68 bytes map, in increasing order, to U+0100, U+0101, ...
  static const ByteLevel& get();

  char32_t to_char(uint8_t b) const { return byte_to_char_[b]; }
  // The byte a code point stands for, or -1 when it is not in the alphabet.
  int to_byte(char32_t c) const { return c < char_to_byte_.size() ? char_to_byte_[c] : -1; }

  // UTF-8 of the mapped characters of `bytes`.
  std::string encode(std::string_view bytes) const;
  // Inverse of encode, applied the way Hugging Face's ByteLevel decoder does to one token:
  // when every character of `token` (valid UTF-8) is in the alphabet, the bytes they stand
  // for; otherwise the token's own UTF-8 bytes, unchanged.
  std::string decode_token(std::string_view token) const;

 private:
  ByteLevel();
  std::array<char32_t, 256> byte_to_char_{};
  std::array<int16_t, 324> char_to_byte_{};  // code points below 0x144
};

}  // namespace nanovllm
