#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace nanovllm {

ByteLevel::ByteLevel() {
  char_to_byte_.fill(-1);
  char32_t next_extra = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const char32_t c = printable ? static_cast<char32_t>(b) : next_extra++;
    byte_to_char_[b] = c;
    char_to_byte_[c] = static_cast<int16_t>(b);
  }
}

const ByteLevel& ByteLevel::get() {
  static const ByteLevel table;
  return table;
}

std::string ByteLevel::encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) utf8::append(out, byte_to_char_[static_cast<uint8_t>(ch)]);
  return out;
}

std::string ByteLevel::decode_token(std::string_view token) const {
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const int b = to_byte(utf8::next(token, pos));
    if (b < 0) return std::string(token);
    out += static_cast<char>(b);
  }
  return out;
}

}  // namespace nanovllm
