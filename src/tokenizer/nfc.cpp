#include "tokenizer/nfc.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <vector>

#include "tokenizer/utf8.h"
#include "util/check.h"

namespace nanovllm {

namespace {

struct CodePointRange {
  char32_t first, last;
};

// Code points Hugging Face's NFC does not normalize: its tables are Unicode 9.0, so later
// combining marks, decompositions and compositions are unknown to it and those code points
// act as plain starters. See tests/tokenizer/hf_nfc_table.js.
constexpr CodePointRange kHfNfcUnknown[] = {
#include "tokenizer/nfc_hf_unknown.inc"
};

bool hf_nfc_unknown(char32_t cp) {
  if (cp < kHfNfcUnknown[0].first) return false;
  const CodePointRange* it = std::upper_bound(std::begin(kHfNfcUnknown), std::end(kHfNfcUnknown), cp,
                                              [](char32_t c, const CodePointRange& r) { return c < r.first; });
  return it != std::begin(kHfNfcUnknown) && cp <= (it - 1)->last;
}

constexpr char32_t kNumCodePoints = 0x110000;

// inert[cp]: NFC leaves any string of inert characters unchanged. A character is inert when
// its combining class is 0, NFC maps it to itself, its decomposition starts with a starter
// that composes with nothing before it, and it never composes with a starter before it.
// (Then NFD splits a string of them into independent starter-led pieces, each recomposing
// to the character it came from.) Code points unknown to HF are inert: HF never touches them.
class InertTable {
 public:
  InertTable() : inert_(kNumCodePoints, false) {
    std::vector<bool> second(kNumCodePoints, false);  // can compose with a preceding starter
    for (char32_t c = 0x1161; c <= 0x1175; ++c) second[c] = true;  // Hangul V: L + V
    for (char32_t c = 0x11A8; c <= 0x11C2; ++c) second[c] = true;  // Hangul T: LV + T
    std::vector<char32_t> first_of(kNumCodePoints, 0);                 // first of NFD, if it differs
    utf8proc_int32_t buf[32];
    for (char32_t cp = 0; cp < kNumCodePoints; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      if (utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->decomp_seqindex == UINT16_MAX) continue;
      utf8proc_int32_t last_boundclass = 0;
      const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf, 32,
                                                         UTF8PROC_DECOMPOSE, &last_boundclass);
      if (n < 1 || (n == 1 && static_cast<char32_t>(buf[0]) == cp)) continue;  // compatibility only
      first_of[cp] = static_cast<char32_t>(buf[0]);
      for (utf8proc_ssize_t i = 1; i < n && i < 32; ++i) second[buf[i]] = true;
    }
    for (char32_t cp = 0; cp < kNumCodePoints; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      if (hf_nfc_unknown(cp) || (cp >= 0xAC00 && cp <= 0xD7A3)) {  // Hangul syllables are stable
        inert_[cp] = true;
        continue;
      }
      if (utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->combining_class != 0 || second[cp]) continue;
      if (first_of[cp] == 0) {
        inert_[cp] = true;
        continue;
      }
      const char32_t head = first_of[cp];
      if (utf8proc_get_property(static_cast<utf8proc_int32_t>(head))->combining_class != 0 || second[head]) continue;
      std::string one;
      utf8::append(one, cp);
      utf8proc_uint8_t* mapped = nullptr;
      const utf8proc_ssize_t m = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(one.data()),
                                              static_cast<utf8proc_ssize_t>(one.size()), &mapped,
                                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
      inert_[cp] = m == static_cast<utf8proc_ssize_t>(one.size()) &&
                   std::equal(one.begin(), one.end(), reinterpret_cast<const char*>(mapped));
      std::free(mapped);
    }
  }
  bool operator()(char32_t cp) const { return inert_[cp]; }

 private:
  std::vector<bool> inert_;
};

void append_utf8proc_nfc(std::string& out, std::string_view s) {
  if (s.empty()) return;
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &mapped,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  NV_CHECK(n >= 0, "utf8proc_map failed on valid UTF-8: {}", utf8proc_errmsg(n));
  out.append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
  std::free(mapped);
}

// HF's NFC of a window: utf8proc's NFC of the runs between code points HF does not know,
// which are copied as they are (a starter that composes with nothing splits NFC into
// independent parts).
void append_hf_nfc(std::string& out, std::string_view s) {
  size_t run = 0, pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    const char32_t cp = utf8::next(s, pos);
    if (cp >= 0x7FD && hf_nfc_unknown(cp)) {
      append_utf8proc_nfc(out, s.substr(run, start - run));
      out.append(s.substr(start, pos - start));
      run = pos;
    }
  }
  append_utf8proc_nfc(out, s.substr(run));
}

}  // namespace

std::string nfc(std::string_view s) {
  size_t first_high = 0;  // U+0300 is the first code point that is not inert (lead byte 0xCC)
  while (first_high < s.size() && static_cast<uint8_t>(s[first_high]) < 0xCC) ++first_high;
  if (first_high == s.size()) return std::string(s);

  static const InertTable inert;
  std::string out;
  out.reserve(s.size());
  size_t copied = 0;       // s[0, copied) is in out
  size_t prev_start = 0;   // start of the previous character
  bool prev_inert = false;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    if (static_cast<uint8_t>(s[pos]) < 0x80) {  // ASCII is inert
      prev_start = pos++;
      prev_inert = true;
      continue;
    }
    const char32_t cp = utf8::next(s, pos);
    if (inert(cp)) {
      prev_start = start;
      prev_inert = true;
      continue;
    }
    // A window that NFC may change: from the starter before it (the last inert character,
    // which later characters may compose with) to the next inert character.
    const size_t window_start = prev_inert ? prev_start : start;
    size_t window_end = pos;
    while (window_end < s.size()) {
      size_t next = window_end;
      if (inert(utf8::next(s, next))) break;
      window_end = next;
    }
    out.append(s.substr(copied, window_start - copied));
    append_hf_nfc(out, s.substr(window_start, window_end - window_start));
    copied = pos = window_end;
    prev_inert = false;
  }
  out.append(s.substr(copied));
  return out;
}

}  // namespace nanovllm
