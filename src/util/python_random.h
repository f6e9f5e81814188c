#pragma once
// PythonRandom: CPython's random.Random (MT19937), bit for bit, for the parts nano-vllm's bench.py
// uses: seed(int), random(), getrandbits(k), randint(a, b).
#include <array>
#include <cstdint>

namespace nanovllm {

class PythonRandom {
 public:
  explicit PythonRandom(uint64_t seed = 0) { this->seed(seed); }

  // random.seed(n) for an int n >= 0: init_by_array over n's 32-bit words, least significant first
  // (at least one word). CPython seeds with abs(n), so a negative n is seed(|n|).
  void seed(uint64_t n);
  // random.random(): a double in [0, 1) with 53 random bits.
  double random();
  // random.getrandbits(k), 0 <= k <= 64.
  uint64_t getrandbits(int k);
  // random._randbelow(n) (getrandbits rejection sampling, k = n.bit_length()), n >= 1.
  uint64_t randbelow(uint64_t n);
  // random.randint(a, b): a + _randbelow(b - a + 1), a <= b.
  int64_t randint(int64_t a, int64_t b);

  // One raw MT19937 output (genrand_uint32).
  uint32_t genrand_uint32();

 private:
  static constexpr int kN = 624;
  void init_genrand(uint32_t s);
  void init_by_array(const uint32_t* key, int key_length);

  std::array<uint32_t, kN> mt_{};
  int mti_ = kN + 1;
};

}  // namespace nanovllm
