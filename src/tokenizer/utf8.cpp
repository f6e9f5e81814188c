#include "tokenizer/utf8.h"

namespace nanovllm::utf8 {

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

char32_t next(std::string_view s, size_t& pos) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t c = b(pos);
  if (c < 0x80) {
    pos += 1;
    return c;
  }
  if (c < 0xE0) {
    const char32_t cp = ((c & 0x1F) << 6) | (b(pos + 1) & 0x3F);
    pos += 2;
    return cp;
  }
  if (c < 0xF0) {
    const char32_t cp = ((c & 0x0F) << 12) | ((b(pos + 1) & 0x3F) << 6) | (b(pos + 2) & 0x3F);
    pos += 3;
    return cp;
  }
  const char32_t cp = ((c & 0x07) << 18) | ((b(pos + 1) & 0x3F) << 12) |
                      ((b(pos + 2) & 0x3F) << 6) | (b(pos + 3) & 0x3F);
  pos += 4;
  return cp;
}

namespace {

// The well-formed UTF-8 table (Unicode 15, table 3-7): for a lead byte, the sequence length
// and the allowed range of the second byte (later bytes are always 80..BF). Length 0: the
// byte can never start a character.
struct Lead {
  int len;
  uint8_t lo, hi;
};

Lead lead_of(uint8_t c) {
  if (c < 0x80) return {1, 0, 0};
  if (c < 0xC2) return {0, 0, 0};
  if (c < 0xE0) return {2, 0x80, 0xBF};
  if (c == 0xE0) return {3, 0xA0, 0xBF};
  if (c == 0xED) return {3, 0x80, 0x9F};
  if (c < 0xF0) return {3, 0x80, 0xBF};
  if (c == 0xF0) return {4, 0x90, 0xBF};
  if (c < 0xF4) return {4, 0x80, 0xBF};
  if (c == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Length of the well-formed prefix of the sequence starting at s[pos]: equals lead.len
// for a complete character, less for a truncated or broken one (at least 0).
int valid_prefix(std::string_view s, size_t pos, const Lead& lead) {
  int n = 1;
  for (; n < lead.len && pos + n < s.size(); ++n) {
    const uint8_t c = static_cast<uint8_t>(s[pos + n]);
    const uint8_t lo = n == 1 ? lead.lo : 0x80;
    const uint8_t hi = n == 1 ? lead.hi : 0xBF;
    if (c < lo || c > hi) break;
  }
  return n;
}

}  // namespace

size_t find_invalid(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const uint8_t c = static_cast<uint8_t>(s[pos]);
    if (c < 0x80) {
      ++pos;
      continue;
    }
    const Lead lead = lead_of(c);
    if (lead.len == 0 || valid_prefix(s, pos, lead) != lead.len) return pos;
    pos += lead.len;
  }
  return std::string_view::npos;
}

size_t append_lossy(std::string& out, std::string_view s, bool final_chunk) {
  size_t pos = 0;
  size_t run = 0;  // start of the pending run of valid bytes, copied in one append
  while (pos < s.size()) {
    const uint8_t c = static_cast<uint8_t>(s[pos]);
    if (c < 0x80) {
      ++pos;
      continue;
    }
    const Lead lead = lead_of(c);
    const int n = lead.len == 0 ? 1 : valid_prefix(s, pos, lead);
    if (n == lead.len) {
      pos += n;
      continue;
    }
    // Either broken (a byte that cannot follow), or cut off by the end of the input.
    const bool truncated = lead.len != 0 && pos + n == s.size();
    out.append(s.substr(run, pos - run));
    if (truncated && !final_chunk) return pos;
    append(out, kReplacement);
    pos += n;
    run = pos;
  }
  out.append(s.substr(run, pos - run));
  return pos;
}

}  // namespace nanovllm::utf8
