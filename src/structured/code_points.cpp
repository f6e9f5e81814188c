#include "structured/code_points.h"

#include <algorithm>

#include "util/check.h"

namespace nanovllm::structured {

CodePointSet::CodePointSet(std::vector<CodePointRange> ranges) : ranges_(std::move(ranges)) {
  normalize();
}

CodePointSet CodePointSet::any() {
  CodePointSet s;
  s.ranges_ = {{0, 0xD7FF}, {0xE000, kMaxCodePoint}};
  return s;
}

void CodePointSet::normalize() {
  std::sort(ranges_.begin(), ranges_.end(),
            [](const CodePointRange& a, const CodePointRange& b) { return a.lo < b.lo; });
  std::vector<CodePointRange> out;
  for (const CodePointRange& r : ranges_) {
    NV_CHECK(r.lo <= r.hi && r.hi <= kMaxCodePoint, "bad code point range {:x}-{:x}", r.lo, r.hi);
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  ranges_ = std::move(out);
}

void CodePointSet::add(uint32_t lo, uint32_t hi) {
  ranges_.push_back({lo, hi});
  normalize();
}

void CodePointSet::add(const CodePointSet& other) {
  ranges_.insert(ranges_.end(), other.ranges_.begin(), other.ranges_.end());
  normalize();
}

CodePointSet CodePointSet::minus(const CodePointSet& other) const {
  CodePointSet out;
  size_t j = 0;
  for (CodePointRange r : ranges_) {
    uint32_t lo = r.lo;
    bool done = false;
    while (j < other.ranges_.size() && other.ranges_[j].hi < lo) ++j;
    for (size_t k = j; k < other.ranges_.size() && other.ranges_[k].lo <= r.hi; ++k) {
      const CodePointRange& o = other.ranges_[k];
      if (o.lo > lo) out.ranges_.push_back({lo, o.lo - 1});
      if (o.hi >= r.hi) {
        done = true;
        break;
      }
      lo = std::max(lo, o.hi + 1);
    }
    if (!done && lo <= r.hi) out.ranges_.push_back({lo, r.hi});
  }
  out.normalize();
  return out;
}

CodePointSet CodePointSet::complement() const { return any().minus(*this); }

bool CodePointSet::contains(uint32_t cp) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), cp,
                             [](uint32_t c, const CodePointRange& r) { return c < r.lo; });
  return it != ranges_.begin() && std::prev(it)->hi >= cp;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

int32_t decode_utf8(std::string_view text, size_t& pos) {
  if (pos >= text.size()) return -1;
  const uint8_t b0 = uint8_t(text[pos]);
  int n = 0;
  uint32_t cp = 0, min = 0;
  if (b0 < 0x80) {
    ++pos;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    n = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return -1;
  }
  if (pos + n > text.size()) return -1;
  for (int i = 1; i < n; ++i) {
    const uint8_t b = uint8_t(text[pos + i]);
    if ((b & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  pos += n;
  return int32_t(cp);
}

namespace {

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// Splits [lo, hi] (both of UTF-8 length n) until each piece is a product of byte ranges, that
// is, lo and hi differ only in positions where lo has all-zero and hi all-one continuation bits.
void split_same_length(uint32_t lo, uint32_t hi, int n, std::vector<std::vector<ByteRange>>& out) {
  struct Piece {
    uint32_t lo, hi;
  };
  std::vector<Piece> work{{lo, hi}};  // explicit stack: at most ~3 levels deep in practice
  while (!work.empty()) {
    Piece p = work.back();
    work.pop_back();
    bool split = false;
    for (int i = 1; i < n && !split; ++i) {
      const uint32_t m = (uint32_t(1) << (6 * i)) - 1;  // the low i continuation bytes
      if ((p.lo & ~m) != (p.hi & ~m)) {
        if ((p.lo & m) != 0) {
          work.push_back({(p.lo | m) + 1, p.hi});
          work.push_back({p.lo, p.lo | m});
          split = true;
        } else if ((p.hi & m) != m) {
          work.push_back({p.hi & ~m, p.hi});
          work.push_back({p.lo, (p.hi & ~m) - 1});
          split = true;
        }
      }
    }
    if (split) continue;
    std::string a, b;
    append_utf8(p.lo, a);
    append_utf8(p.hi, b);
    std::vector<ByteRange> seq(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) seq[size_t(i)] = {uint8_t(a[size_t(i)]), uint8_t(b[size_t(i)])};
    out.push_back(std::move(seq));
  }
}

}  // namespace

std::vector<std::vector<ByteRange>> utf8_sequences(const CodePointSet& set) {
  const CodePointSet cps = set.minus(CodePointSet({{0xD800, 0xDFFF}}));
  std::vector<std::vector<ByteRange>> out;
  const uint32_t length_ends[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  for (const CodePointRange& r : cps.ranges()) {
    uint32_t lo = r.lo;
    for (uint32_t end : length_ends) {
      if (lo > r.hi) break;
      if (lo > end) continue;
      const uint32_t hi = std::min(r.hi, end);
      split_same_length(lo, hi, utf8_length(lo), out);
      lo = hi + 1;
    }
  }
  return out;
}

}  // namespace nanovllm::structured
