#pragma once
// Host memory for the CPU backend's buffers (weights, KV cache, scratch) and for the bandwidth
// probe that measures how fast they stream. Buffers of 2 MiB or more are their own anonymous
// mapping starting on a 2 MiB boundary, with transparent huge pages asked for (MADV_HUGEPAGE:
// Debian's default THP mode serves huge pages only where asked). A decode step streams every
// weight once; through 4 KiB pages each stream takes a TLB walk every 4 KiB and the hardware
// prefetchers stop at each page boundary. Measured on a 2-core Zen 3 (Qwen3-30B-A3B shapes, 4
// layers): one-sequence decode 24.4-24.7 ms a token against 27.4-31.9 on 4 KiB pages, 16
// sequences +4% total tok/s. The kernel may refuse or split huge pages (no free 2 MiB page,
// THP off): the buffer then works on 4 KiB pages, only slower. Smaller buffers come from the
// heap, 64-byte aligned.
#include <cstddef>

namespace nanovllm::cpu {

// `bytes` (0 counts as 1) 64-byte aligned, zeroed only when mapped (2 MiB and up); fails with
// a message naming the size when the system refuses. Free with host_free(p, bytes).
void* host_alloc(size_t bytes);
void host_free(void* p, size_t bytes);

}  // namespace nanovllm::cpu
