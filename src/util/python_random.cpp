#include "util/python_random.h"

#include <bit>

#include "util/check.h"

namespace nanovllm {

namespace {
constexpr int kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu;
constexpr uint32_t kUpperMask = 0x80000000u;
constexpr uint32_t kLowerMask = 0x7fffffffu;
}  // namespace

void PythonRandom::init_genrand(uint32_t s) {
  mt_[0] = s;
  for (int i = 1; i < kN; ++i) {
    mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + uint32_t(i);
  }
  mti_ = kN;
}

void PythonRandom::init_by_array(const uint32_t* key, int key_length) {
  init_genrand(19650218u);
  int i = 1, j = 0;
  for (int k = kN > key_length ? kN : key_length; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + uint32_t(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= key_length) j = 0;
  }
  for (int k = kN - 1; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - uint32_t(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000u;  // MSB is 1, assuring a non-zero initial array
  mti_ = kN;
}

void PythonRandom::seed(uint64_t n) {
  uint32_t key[2] = {uint32_t(n), uint32_t(n >> 32)};
  init_by_array(key, key[1] != 0 ? 2 : 1);
}

uint32_t PythonRandom::genrand_uint32() {
  if (mti_ >= kN) {
    NV_CHECK(mti_ == kN, "PythonRandom used before seeding");
    int kk = 0;
    for (; kk < kN - kM; ++kk) {
      uint32_t y = (mt_[kk] & kUpperMask) | (mt_[kk + 1] & kLowerMask);
      mt_[kk] = mt_[kk + kM] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
    }
    for (; kk < kN - 1; ++kk) {
      uint32_t y = (mt_[kk] & kUpperMask) | (mt_[kk + 1] & kLowerMask);
      mt_[kk] = mt_[kk + (kM - kN)] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
    }
    uint32_t y = (mt_[kN - 1] & kUpperMask) | (mt_[0] & kLowerMask);
    mt_[kN - 1] = mt_[kM - 1] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
    mti_ = 0;
  }
  uint32_t y = mt_[mti_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= (y >> 18);
  return y;
}

double PythonRandom::random() {
  uint32_t a = genrand_uint32() >> 5, b = genrand_uint32() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

uint64_t PythonRandom::getrandbits(int k) {
  NV_CHECK(k >= 0 && k <= 64, "getrandbits({})", k);
  if (k == 0) return 0;
  if (k <= 32) return genrand_uint32() >> (32 - k);
  // Words least significant first; the last word keeps its top (k - 32) bits.
  uint64_t low = genrand_uint32();
  uint64_t high = genrand_uint32() >> (64 - k);
  return low | (high << 32);
}

uint64_t PythonRandom::randbelow(uint64_t n) {
  NV_CHECK(n >= 1, "randbelow({})", n);
  int k = std::bit_width(n);  // n.bit_length(), not (n - 1)'s: n == 1 still draws a word
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

int64_t PythonRandom::randint(int64_t a, int64_t b) {
  NV_CHECK(a <= b, "randint({}, {})", a, b);
  return a + int64_t(randbelow(uint64_t(b) - uint64_t(a) + 1));
}

}  // namespace nanovllm
