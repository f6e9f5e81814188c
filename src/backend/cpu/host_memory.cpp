#include "backend/cpu/host_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "util/check.h"

namespace nanovllm::cpu {

namespace {

constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kPage = 4096;

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

void* host_alloc(size_t bytes) {
  if (bytes < kHugePage) {
    void* p = std::aligned_alloc(64, round_up(bytes == 0 ? 1 : bytes, 64));
    if (!p) fail("cpu backend: out of memory allocating {} bytes", bytes);
    return p;
  }
  // Map one huge page more than needed, keep the 2 MiB-aligned part, return the rest.
  const size_t len = round_up(bytes, kPage), reserve = len + kHugePage;
  void* base =
      ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    fail("cpu backend: cannot map {} bytes: {} (memory, or the process's count of mappings: "
         "vm.max_map_count)", bytes, std::strerror(errno));
  }
  const uintptr_t b = reinterpret_cast<uintptr_t>(base);
  const uintptr_t start = round_up(b, kHugePage);
  if (start > b) ::munmap(base, start - b);
  if (b + reserve > start + len)
    ::munmap(reinterpret_cast<void*>(start + len), b + reserve - start - len);
  void* p = reinterpret_cast<void*>(start);
  ::madvise(p, len, MADV_HUGEPAGE);  // advice: refused (THP off), the pages stay 4 KiB
  return p;
}

void host_free(void* p, size_t bytes) {
  if (!p) return;
  if (bytes < kHugePage) {
    std::free(p);
  } else {
    ::munmap(p, round_up(bytes, kPage));
  }
}

}  // namespace nanovllm::cpu
