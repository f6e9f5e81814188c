#pragma once
// FP8 E4M3 (OCP "e4m3fn": 1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no infinities,
// NaN = S.1111.111), the element type of the fp8 KV cache. Encoding rounds to nearest, ties to
// even, and saturates at +-448 (the largest finite value; infinities too); NaN stays NaN. Pure
// integer arithmetic on the float's bits, so the CPU, CUDA and the reference round identically.
//
//   code  value
//   0x00  +0            0x01..0x07  subnormal m * 2^-9
//   0x08  2^-6 (smallest normal)     0x7E  448 (largest)     0x7F  NaN
#include <cstdint>
#include <cstring>

#include "runtime/host_device.h"

namespace nanovllm {

inline constexpr float kFp8E4M3Max = 448.0f;

NV_HOST_DEVICE inline uint32_t fp8_float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

// x -> E4M3 code (round to nearest even, saturating).
NV_HOST_DEVICE inline uint8_t float_to_fp8_e4m3(float x) {
  const uint32_t bits = fp8_float_bits(x);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80u);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return uint8_t(sign | 0x7Fu);        // NaN
  if (abs_bits >= 0x43E00000u) return uint8_t(sign | 0x7Eu);       // |x| >= 448 (and inf)
  const int exp32 = int(abs_bits >> 23) - 127;                     // unbiased exponent of |x|
  const uint32_t mant = abs_bits & 0x7FFFFFu;
  uint32_t code;
  if (exp32 < -6) {  // below the smallest normal: units of 2^-9 (a code of 8 is that normal)
    if (exp32 < -10 - 14) return sign;                             // < 2^-24: rounds to 0
    const uint32_t full = mant | 0x800000u;                         // 1.mant as an integer
    const int shift = 14 - exp32;                                   // |x| / 2^-9 = full >> shift
    if (shift > 24) return sign;                                    // < 2^-10: below half a unit
    code = full >> shift;
    const uint32_t rem = full & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (code & 1u))) ++code;
  } else {  // normal: exponent field exp32 + 7, top 3 mantissa bits, carry may bump the exponent
    code = (uint32_t(exp32 + 7) << 3) | (mant >> 20);
    const uint32_t rem = mant & 0xFFFFFu, half = 0x80000u;
    if (rem > half || (rem == half && (code & 1u))) ++code;
    if (code > 0x7Eu) code = 0x7Eu;                                 // 464 and above round past 448
  }
  return uint8_t(sign | code);
}

// E4M3 code -> float (exact).
NV_HOST_DEVICE inline float fp8_e4m3_to_float(uint8_t c) {
  const uint32_t sign = uint32_t(c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 0xFu, m = c & 7u;
  uint32_t bits;
  if (e == 0xFu && m == 7u) {
    bits = sign | 0x7FC00000u;                                      // NaN
  } else if (e == 0) {
    if (m == 0) {
      bits = sign;                                                  // +-0
    } else {  // m * 2^-9: normalize m (1..7) into 1.xxx * 2^k
      int k = m >= 4 ? 2 : (m >= 2 ? 1 : 0);                        // floor(log2(m))
      const uint32_t frac = (m << (23 - k)) & 0x7FFFFFu;
      bits = sign | (uint32_t(k - 9 + 127) << 23) | frac;
    }
  } else {
    bits = sign | ((e - 7 + 127) << 23) | (m << 20);
  }
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

}  // namespace nanovllm
