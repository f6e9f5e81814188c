#include "structured/mask_cache.h"

#include <cstring>

namespace nanovllm::structured {

std::shared_ptr<const CachedMask> CachedMask::pack(const uint32_t* bitmask, size_t num_words,
                                                   int count) {
  auto m = std::make_shared<CachedMask>();
  m->count = count;
  if (size_t(count) < num_words / 2) {
    m->ids.reserve(size_t(count));
    for (size_t w = 0; w < num_words; ++w) {
      for (uint32_t bits = bitmask[w]; bits != 0; bits &= bits - 1) {
        m->ids.push_back(int32_t(w * 32 + size_t(__builtin_ctz(bits))));
      }
    }
  } else {
    m->words.assign(bitmask, bitmask + num_words);
  }
  return m;
}

void CachedMask::unpack(uint32_t* bitmask, size_t num_words) const {
  if (!words.empty()) {
    std::memcpy(bitmask, words.data(), num_words * sizeof(uint32_t));
    return;
  }
  std::memset(bitmask, 0, num_words * sizeof(uint32_t));
  for (int32_t id : ids) bitmask[id >> 5] |= 1u << (id & 31);
}

}  // namespace nanovllm::structured
