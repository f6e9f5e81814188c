// The CUDA emulator's runtime (see include/nanovllm_cuda_emu.h): the device's memory, streams
// and graphs, launch validation, and the CTA executor that runs a block's threads as fibers.
//
// The emulated devices (NANOVLLM_CUDA_EMU_DEVICES, default 2, one memory pool): their state
// (allocations, function attributes) is a function-local static guarded by a mutex, as a
// driver's is; the current device and the current CTA are per OS thread.
#include <pthread.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "nanovllm_cuda_emu.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define NV_EMU_ASAN 1
#else
#define NV_EMU_ASAN 0
#endif

#if !defined(__x86_64__)
#error "the CUDA emulator's fiber switch is written for x86-64"
#endif

// Saves the callee-saved registers on the current stack, stores the stack pointer in *save_sp,
// and resumes the context whose stack pointer is load_sp. MXCSR and the x87 control word are
// not switched: kernels never change them, so every fiber runs with the launching thread's.
extern "C" void nv_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl nv_emu_switch
  .type nv_emu_switch, @function
nv_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size nv_emu_switch, .-nv_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");

namespace nanovllm::cuda_emu {

namespace {

using emu::die;

size_t env_size(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (*end != '\0' || x == 0) die(std::string(name) + "=" + v + ": expected a positive integer");
  return size_t(x);
}

// ---- the device: memory and function attributes ----

struct Device {
  std::mutex mu;
  std::map<uintptr_t, size_t> allocs;  // begin -> bytes
  size_t used = 0;
  size_t total = env_size("NANOVLLM_CUDA_EMU_MEMORY_MB", 2048) << 20;
  int sms = int(env_size("NANOVLLM_CUDA_EMU_SMS", 8));
  int devices = int(env_size("NANOVLLM_CUDA_EMU_DEVICES", 2));  // sharing one memory pool
  std::map<const void*, int> max_dynamic_smem;  // cudaFuncAttributeMaxDynamicSharedMemorySize
};

Device& device() {
  static Device d;
  return d;
}

constexpr size_t kDefaultSmem = 48 << 10;
constexpr size_t kMaxSmemOptin = 227 << 10;  // an H100's

// The allocation holding [p, p + bytes), or false.
bool in_device_memory(const void* p, size_t bytes) {
  Device& d = device();
  std::lock_guard lk(d.mu);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = d.allocs.upper_bound(a);
  if (it == d.allocs.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

void check_device_range(const void* p, size_t bytes, const char* what) {
  if (!in_device_memory(p, bytes)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s: [%p, +%zu bytes) is not inside one cudaMalloc'd buffer",
                  what, p, bytes);
    die(buf);
  }
}

thread_local cudaError_t tl_last_error = cudaSuccess;
thread_local int tl_device = 0;
thread_local int tl_capturing = 0;  // streams this thread is capturing (ThreadLocal mode)

cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) tl_last_error = e;
  return e;
}

}  // namespace

// ---- streams and graphs ----

struct EmuGraph {
  std::vector<std::function<void()>> ops;
};

struct EmuStream {
  bool capturing = false;
  bool invalidated = false;
  std::unique_ptr<EmuGraph> graph;
};

namespace {
EmuStream& legacy_stream() {
  static EmuStream s;
  return s;
}
EmuStream& stream_of(cudaStream_t s) { return s ? *s : legacy_stream(); }
}  // namespace

namespace emu {

void die(const std::string& msg) {
  std::fprintf(stderr, "CUDA emulator: %s\n", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

bool is_device_pointer(const void* p) { return in_device_memory(p, 0); }
bool is_device_range(const void* p, size_t bytes) { return in_device_memory(p, bytes); }

void submit_op(cudaStream_t stream, std::function<void()> op) {
  EmuStream& s = stream_of(stream);
  if (s.capturing)
    s.graph->ops.push_back(std::move(op));
  else
    op();
}

}  // namespace emu

// ---- the CTA executor ----

namespace {

constexpr size_t kStackBytes = 256 << 10;  // per thread of a CTA (kernels keep arrays in locals)
constexpr size_t kGuardBytes = 4096;       // PROT_NONE below each stack: overflow faults
constexpr int kMaxThreads = 1024;

struct Barrier {
  int live = 0;
  int arrived = 0;
  uint64_t gen = 0;
};

constexpr int kMaxExchangeWords = 6;  // the most u32 a lane gives in one exchange (mma: 6)

struct Warp {
  Barrier bar;
  unsigned live_mask = 0;
  unsigned exited_mask = 0;
  // Published values, double-buffered by the parity of the exchange's barrier generation: a
  // lane that runs ahead into the next exchange writes the other buffer, and cannot run two
  // ahead (the next barrier waits for the slow lanes), so one barrier per exchange suffices.
  // A shuffle gives one word (up to 8 bytes), an mma six u32.
  uint64_t slot[2][32][kMaxExchangeWords];  // read only where `written` says this exchange
  uint64_t written[2][32];  // the barrier generation of lane i's value in each buffer
  Warp() { std::memset(written, 0xff, sizeof written); }
};

struct Fiber {
  void* sp = nullptr;
  int index = 0;
  uint3 tid;
  int warp = 0;
  int lane = 0;
  bool done = false;
  const uint64_t* wait_gen = nullptr;  // blocked while *wait_gen == wait_value
  uint64_t wait_value = 0;
  const char* waiting_at = nullptr;
  void* asan_fake = nullptr;
};

[[noreturn]] void fiber_main();

// Runs CTAs on the calling OS thread, one at a time.
class Executor {
 public:
  Executor() {
    const size_t per = kStackBytes + kGuardBytes;
    region_bytes_ = per * kMaxThreads;
    void* r = mmap(nullptr, region_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) die("cannot map the fiber stacks");
    region_ = static_cast<char*>(r);
    for (int i = 0; i < kMaxThreads; ++i)
      mprotect(region_ + size_t(i) * per, kGuardBytes, PROT_NONE);
    fibers_.resize(kMaxThreads);
  }
  ~Executor() {
#if NV_EMU_ASAN
    // A fiber's frames leave ASan's stack redzones poisoned in the shadow of this region, and
    // munmap does not clear them: a later mapping at the same addresses (a checkpoint's mmap
    // after a tensor-parallel rank thread exited) would read as stack-buffer-underflow.
    ASAN_UNPOISON_MEMORY_REGION(region_, region_bytes_);
#endif
    munmap(region_, region_bytes_);
  }

  void run_grid(const emu::LaunchConfig& cfg, const std::function<void()>& body) {
    grid_ = cfg.grid;
    block_ = cfg.block;
    body_ = &body;
    smem_.assign(cfg.smem + 16, 0xff);
    for (unsigned z = 0; z < cfg.grid.z; ++z)
      for (unsigned y = 0; y < cfg.grid.y; ++y)
        for (unsigned x = 0; x < cfg.grid.x; ++x) {
          block_idx_ = {x, y, z};
          run_block();
        }
    body_ = nullptr;
  }

  Fiber& current() {
    if (!cur_)
      die("a device function (threadIdx, __syncthreads, a shuffle) called outside a kernel");
    return *cur_;
  }
  const uint3& block_idx() const { return block_idx_; }
  const dim3& block_dim() const { return block_; }
  const dim3& grid_dim() const { return grid_; }
  unsigned char* dynamic_shared() {
    // 16-byte aligned, as CUDA's dynamic shared memory is.
    const uintptr_t a = (reinterpret_cast<uintptr_t>(smem_.data()) + 15) & ~uintptr_t(15);
    return reinterpret_cast<unsigned char*>(a);
  }

  void sync_block() { arrive(block_bar_, "__syncthreads"); }
  void sync_warp(unsigned mask) {
    Fiber& f = current();
    check_mask(warps_[size_t(f.warp)], mask, "__syncwarp");
    arrive(warps_[size_t(f.warp)].bar, "__syncwarp");
  }

  uint64_t shuffle(unsigned mask, uint64_t mine, int src, const char* what) {
    const auto [w, round] = publish(mask, &mine, 1, what);
    read_check(*w, round, src, what);
    return w->slot[round & 1][src][0];
  }

  // The mma.sync of the header: one exchange of every lane's six fragment words, then this
  // lane's four outputs from them (32 lanes must take part: a fragment of each is needed).
  void mma_bf16_m16n8k16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    const char* what = "mma.sync.m16n8k16";
    const uint64_t mine[6] = {a[0], a[1], a[2], a[3], b0, b1};
    const auto [w, round] = publish(0xffffffffu, mine, 6, what);
    for (int l = 0; l < 32; ++l) read_check(*w, round, l, what);
    const auto& all = w->slot[round & 1];
    const int lane = current().lane, g = lane / 4, t = lane % 4;
    const auto lo = [](uint64_t v) { return __uint_as_float(uint32_t(v) << 16); };
    const auto hi = [](uint64_t v) { return __uint_as_float(uint32_t(v) & 0xffff0000u); };
    // Quad member kk of a row's (or column's) lanes holds its k = 2kk, 2kk+1, 2kk+8, 2kk+9.
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t* ra = all[g * 4 + kk];  // A[g][..], A[g+8][..]: ra[0..3]
      for (int j = 0; j < 2; ++j) {
        const uint64_t* rb = all[(2 * t + j) * 4 + kk];  // B[..][n] of output column n = 2t + j
        c[j] += lo(ra[0]) * lo(rb[4]) + hi(ra[0]) * hi(rb[4]) + lo(ra[2]) * lo(rb[5]) +
                hi(ra[2]) * hi(rb[5]);
        c[2 + j] += lo(ra[1]) * lo(rb[4]) + hi(ra[1]) * hi(rb[4]) + lo(ra[3]) * lo(rb[5]) +
                    hi(ra[3]) * hi(rb[5]);
      }
    }
  }

  // Called on a fiber's own stack when the kernel body returns.
  [[noreturn]] void finish_current() {
    Fiber& f = current();
    f.done = true;
    --remaining_;
    Warp& w = warps_[size_t(f.warp)];
    w.live_mask &= ~(1u << f.lane);
    w.exited_mask |= 1u << f.lane;
    leave(w.bar);
    leave(block_bar_);
    switch_away(f, /*exiting=*/true);
    die("a finished fiber was resumed");
  }

  void run_body() { (*body_)(); }

  // A fiber's first moment on its own stack (ASan: the switch into it is complete).
  static void fiber_started() {
#if NV_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  }

 private:
  char* stack_lo(size_t i) const { return region_ + i * (kStackBytes + kGuardBytes) + kGuardBytes; }

  // Runs the block's threads to completion. Control moves from fiber to fiber (a fiber that
  // blocks or ends hands over to the next runnable one, round robin); it comes back here when
  // every thread has ended, or when none can run: a deadlock.
  void run_block() {
    const int n = int(block_.x * block_.y * block_.z);
    const int nwarps = (n + 31) / 32;
    warps_.assign(size_t(nwarps), Warp{});
    block_bar_ = Barrier{};
    block_bar_.live = n;
    std::memset(smem_.data(), 0xff, smem_.size());
    nfibers_ = n;
    for (int i = 0; i < n; ++i) {
      Fiber& f = fibers_[size_t(i)];
      f = Fiber{};
      f.index = i;
      f.tid = {unsigned(i) % block_.x, unsigned(i) / block_.x % block_.y,
               unsigned(i) / (block_.x * block_.y)};
      f.warp = i / 32;
      f.lane = i % 32;
      Warp& w = warps_[size_t(f.warp)];
      w.live_mask |= 1u << f.lane;
      ++w.bar.live;
      init_stack(f, stack_lo(size_t(i)), i);
    }
    remaining_ = n;
#if NV_EMU_ASAN
    if (!sched_stack_bottom_) {
      pthread_attr_t attr;
      pthread_getattr_np(pthread_self(), &attr);
      void* lo = nullptr;
      pthread_attr_getstack(&attr, &lo, &sched_stack_size_);
      pthread_attr_destroy(&attr);
      sched_stack_bottom_ = lo;
    }
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, stack_lo(0), kStackBytes);
#endif
    cur_ = &fibers_[0];
    nv_emu_switch(&sched_sp_, fibers_[0].sp);
#if NV_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    cur_ = nullptr;
    if (remaining_ > 0) report_deadlock(n);
  }

  // The next thread after `from` (round robin) that has not ended and is not blocked, or -1.
  int next_runnable(int from) const {
    for (int k = 1; k <= nfibers_; ++k) {
      const int j = (from + k) % nfibers_;
      const Fiber& g = fibers_[size_t(j)];
      if (!g.done && !(g.wait_gen && *g.wait_gen == g.wait_value)) return j;
    }
    return -1;
  }

  // Leaves fiber f (blocked, or ended when `exiting`) for the next runnable fiber, or for the
  // block's scheduler when there is none; returns when f is resumed.
  void switch_away(Fiber& f, bool exiting) {
    const int j = next_runnable(f.index);
    void** save = &f.sp;
    if (j < 0) {
      cur_ = nullptr;
#if NV_EMU_ASAN
      __sanitizer_start_switch_fiber(exiting ? nullptr : &f.asan_fake, sched_stack_bottom_,
                                     sched_stack_size_);
#else
      (void)exiting;
#endif
      nv_emu_switch(save, sched_sp_);
    } else {
      Fiber& g = fibers_[size_t(j)];
      g.wait_gen = nullptr;
      g.waiting_at = nullptr;
      cur_ = &g;
#if NV_EMU_ASAN
      __sanitizer_start_switch_fiber(exiting ? nullptr : &f.asan_fake, stack_lo(size_t(j)),
                                     kStackBytes);
#endif
      nv_emu_switch(save, g.sp);
    }
#if NV_EMU_ASAN
    __sanitizer_finish_switch_fiber(f.asan_fake, nullptr, nullptr);
#endif
  }

  // This lane's n words published in its warp's current exchange, and the exchange passed (one
  // warp barrier): the warp and the exchange's generation, whose buffer the caller reads before
  // its next exchange.
  std::pair<Warp*, uint64_t> publish(unsigned mask, const uint64_t* mine, int n, const char* what) {
    Fiber& f = current();
    Warp& w = warps_[size_t(f.warp)];
    check_mask(w, mask, what);
    const uint64_t round = w.bar.gen;
    std::memcpy(w.slot[round & 1][f.lane], mine, sizeof(uint64_t) * size_t(n));
    w.written[round & 1][f.lane] = round;
    arrive(w.bar, what);
    return {&w, round};
  }

  // Lane src may have exited since it published (it was the last to arrive and ran on): what
  // counts is that it published in this exchange.
  void read_check(const Warp& w, uint64_t round, int src, const char* what) {
    if (src < 0 || src > 31 || w.written[round & 1][src] != round)
      fault(std::string(what) + " reads lane " + std::to_string(src) +
            ", which did not take part in the exchange (it exited, or the warp has no such lane)");
  }

  void init_stack(Fiber& f, char* lo, int i) {
#if NV_EMU_ASAN
    // A fiber's frames never unwind (it ends by switching away): clear their redzones.
    __asan_unpoison_memory_region(lo, kStackBytes);
#endif
    // Stack tops staggered by 64-byte lines (the stacks are 260 KiB apart, a multiple of 4 KiB:
    // unstaggered, every fiber's top frame would fall in the same L1 set).
    const uintptr_t stagger = uintptr_t(i % 61) * 64;
    uintptr_t top = (reinterpret_cast<uintptr_t>(lo) + kStackBytes - stagger) & ~uintptr_t(15);
    uint64_t* p = reinterpret_cast<uint64_t*>(top);
    *--p = 0;                                        // fiber_main's (unused) return address
    *--p = reinterpret_cast<uint64_t>(&fiber_main);  // where the first switch returns to
    for (int r = 0; r < 6; ++r) *--p = 0;            // rbp rbx r12 r13 r14 r15
    f.sp = p;
  }

  void arrive(Barrier& b, const char* what) {
    Fiber& f = current();
    const uint64_t g = b.gen;
    if (++b.arrived >= b.live) {
      b.arrived = 0;
      ++b.gen;
      return;
    }
    f.wait_gen = &b.gen;
    f.wait_value = g;
    f.waiting_at = what;
    switch_away(f, false);
  }

  // A thread that exits no longer counts for the barriers it belongs to.
  static void leave(Barrier& b) {
    --b.live;
    if (b.arrived > 0 && b.arrived >= b.live) {
      b.arrived = 0;
      ++b.gen;
    }
  }

  // Only whole-warp masks are emulated (the backend uses no other): the mask must name every
  // lane the warp has, and none of them may have exited.
  void check_mask(const Warp& w, unsigned mask, const char* what) {
    const unsigned lanes = w.live_mask | w.exited_mask;
    if ((mask & lanes) != lanes)
      fault(std::string(what) + ": partial warp masks are not emulated (mask " +
            std::to_string(mask) + ")");
    if (mask & w.exited_mask)
      fault(std::string(what) + " with a mask naming lanes that have exited");
  }

  [[noreturn]] void fault(const std::string& msg) {
    const Fiber& f = current();
    char where[160];
    std::snprintf(where, sizeof where, " (block (%u,%u,%u) of (%u,%u,%u), thread (%u,%u,%u))",
                  block_idx_.x, block_idx_.y, block_idx_.z, grid_.x, grid_.y, grid_.z, f.tid.x,
                  f.tid.y, f.tid.z);
    die(msg + where);
  }

  [[noreturn]] void report_deadlock(int n) {
    std::map<std::string, int> at;
    for (int i = 0; i < n; ++i) {
      const Fiber& f = fibers_[size_t(i)];
      if (!f.done) ++at[f.waiting_at ? f.waiting_at : "?"];
    }
    std::ostringstream msg;
    msg << "deadlock in block (" << block_idx_.x << "," << block_idx_.y << "," << block_idx_.z
        << "): threads wait at barriers the others never reach:";
    for (const auto& [what, count] : at) msg << " " << count << " at " << what << ";";
    die(msg.str());
  }

  char* region_ = nullptr;
  size_t region_bytes_ = 0;
  std::vector<Fiber> fibers_;
  std::vector<Warp> warps_;
  Barrier block_bar_;
  Fiber* cur_ = nullptr;
  uint3 block_idx_;
  dim3 block_, grid_;
  const std::function<void()>* body_ = nullptr;
  std::vector<unsigned char> smem_;
  int nfibers_ = 0;
  int remaining_ = 0;  // threads of the block that have not ended
  void* sched_sp_ = nullptr;
  const void* sched_stack_bottom_ = nullptr;  // ASan: the OS thread's stack
  size_t sched_stack_size_ = 0;
};

Executor& executor() {
  thread_local Executor e;
  return e;
}

void fiber_main() {
  Executor::fiber_started();
  Executor& e = executor();
  e.run_body();
  e.finish_current();
}

}  // namespace

const uint3& emu_thread_idx() { return executor().current().tid; }
const uint3& emu_block_idx() { return executor().block_idx(); }
const dim3& emu_block_dim() { return executor().block_dim(); }
const dim3& emu_grid_dim() { return executor().grid_dim(); }
void __syncthreads() { executor().sync_block(); }
void __syncwarp(unsigned mask) { executor().sync_warp(mask); }

namespace emu {

uint64_t shuffle(unsigned mask, uint64_t mine, int src, const char* what) {
  return executor().shuffle(mask, mine, src, what);
}
int lane_id() { return executor().current().lane; }
void mma_bf16_m16n8k16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  executor().mma_bf16_m16n8k16(c, a, b0, b1);
}
unsigned char* dynamic_shared() { return executor().dynamic_shared(); }

cudaError_t set_function_attribute(const void* fn, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      size_t(value) > kMaxSmemOptin)
    return set_error(cudaErrorInvalidValue);
  Device& d = device();
  std::lock_guard lk(d.mu);
  d.max_dynamic_smem[fn] = value;
  return cudaSuccess;
}

bool validate_launch(const LaunchConfig& cfg, const void* fn, const void* const* ptrs,
                     size_t nptrs) {
  const uint64_t threads = uint64_t(cfg.block.x) * cfg.block.y * cfg.block.z;
  if (threads == 0 || threads > uint64_t(kMaxThreads) || cfg.block.z > 64 || cfg.grid.x == 0 ||
      cfg.grid.y == 0 || cfg.grid.z == 0 || cfg.grid.x > 0x7fffffffu || cfg.grid.y > 65535 ||
      cfg.grid.z > 65535) {
    set_error(cudaErrorInvalidConfiguration);
    return false;
  }
  if (cfg.smem > kDefaultSmem) {
    Device& d = device();
    std::lock_guard lk(d.mu);
    auto it = d.max_dynamic_smem.find(fn);
    if (it == d.max_dynamic_smem.end() || size_t(it->second) < cfg.smem) {
      set_error(cudaErrorInvalidValue);
      return false;
    }
  }
  for (size_t i = 0; i < nptrs; ++i)
    if (ptrs[i] && !is_device_pointer(ptrs[i])) {
      char buf[128];
      std::snprintf(buf, sizeof buf,
                    "a kernel's pointer argument %p is not device memory (a host pointer?)",
                    ptrs[i]);
      die(buf);
    }
  return true;
}

void submit_grid(const LaunchConfig& cfg, std::function<void()> body) {
  submit_op(cfg.stream, [cfg, body = std::move(body)]() { executor().run_grid(cfg, body); });
}

}  // namespace emu

// ---- runtime API ----

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device().devices;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) {
  if (dev < 0 || dev >= device().devices) return set_error(cudaErrorInvalidDevice);
  tl_device = dev;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* dev) {
  *dev = tl_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int dev) {
  if (dev < 0 || dev >= device().devices) return set_error(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "nanovllm CUDA emulator");
  prop->totalGlobalMem = device().total;
  prop->sharedMemPerBlock = kDefaultSmem;
  prop->sharedMemPerBlockOptin = kMaxSmemOptin;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = device().sms;
  prop->maxThreadsPerBlock = kMaxThreads;
  prop->warpSize = 32;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  return tl_capturing ? set_error(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = nullptr;
  if (tl_capturing) return set_error(cudaErrorStreamCaptureUnsupported);
  Device& d = device();
  // Counted in the driver's 256-byte granules, but allocated (and range-checked) at exactly the
  // bytes asked for, so an ASan build catches any access past them.
  const size_t rounded = (bytes + 255) / 256 * 256;
  {
    std::lock_guard lk(d.mu);
    if (bytes == 0 || d.used + rounded > d.total) return set_error(cudaErrorMemoryAllocation);
    d.used += rounded;
  }
  void* q = nullptr;
  if (posix_memalign(&q, 256, bytes) != 0) {
    std::lock_guard lk(d.mu);
    d.used -= rounded;
    return set_error(cudaErrorMemoryAllocation);
  }
  std::memset(q, 0xff, bytes);  // what nobody wrote reads as NaN / -1
  std::lock_guard lk(d.mu);
  d.allocs[reinterpret_cast<uintptr_t>(q)] = bytes;
  *p = q;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  Device& d = device();
  {
    std::lock_guard lk(d.mu);
    auto it = d.allocs.find(reinterpret_cast<uintptr_t>(p));
    if (it == d.allocs.end()) return set_error(cudaErrorInvalidDevicePointer);
    d.used -= (it->second + 255) / 256 * 256;
    d.allocs.erase(it);
  }
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  Device& d = device();
  std::lock_guard lk(d.mu);
  *total_bytes = d.total;
  *free_bytes = d.total - d.used;
  return cudaSuccess;
}

namespace {

// Checks a copy's pointers against its kind (the device side must be cudaMalloc'd memory, the
// whole range inside one buffer) and whether it may be captured.
cudaError_t check_copy(void* dst, const void* src, size_t dst_span, size_t src_span,
                       cudaMemcpyKind kind, cudaStream_t stream) {
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost &&
      kind != cudaMemcpyDeviceToDevice)
    return set_error(cudaErrorInvalidValue);
  if (dst_dev) check_device_range(dst, dst_span, "cudaMemcpy destination");
  if (src_dev) check_device_range(src, src_span, "cudaMemcpy source");
  // Pageable host memory cannot be part of a captured graph.
  if (stream_of(stream).capturing && kind != cudaMemcpyDeviceToDevice)
    return set_error(cudaErrorStreamCaptureUnsupported);
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (tl_capturing) return set_error(cudaErrorStreamCaptureUnsupported);
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (cudaError_t e = check_copy(dst, src, bytes, bytes, kind, stream); e != cudaSuccess) return e;
  emu::submit_op(stream, [=]() { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > dpitch || width > spitch) return set_error(cudaErrorInvalidValue);
  const size_t dspan = dpitch * (height - 1) + width, sspan = spitch * (height - 1) + width;
  if (cudaError_t e = check_copy(dst, src, dspan, sspan, kind, stream); e != cudaSuccess) return e;
  emu::submit_op(stream, [=]() {
    for (size_t r = 0; r < height; ++r)
      std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                   width);
  });
  return cudaSuccess;
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  if (tl_capturing) return set_error(cudaErrorStreamCaptureUnsupported);
  return cudaMemsetAsync(dst, value, bytes, nullptr);
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  check_device_range(dst, bytes, "cudaMemset");
  emu::submit_op(stream, [=]() { std::memset(dst, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  *stream = new EmuStream;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  return cudaStreamCreate(stream);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream && stream->capturing) return set_error(cudaErrorStreamCaptureUnsupported);
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  EmuStream& s = stream_of(stream);
  if (s.capturing) {
    s.invalidated = true;
    return set_error(cudaErrorStreamCaptureUnsupported);
  }
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  EmuStream& s = stream_of(stream);
  if (s.capturing) {
    s.invalidated = true;
    return set_error(cudaErrorStreamCaptureUnsupported);
  }
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  if (!stream) return set_error(cudaErrorStreamCaptureUnsupported);  // the legacy stream
  if (stream->capturing) return set_error(cudaErrorInvalidValue);
  stream->capturing = true;
  stream->invalidated = false;
  stream->graph = std::make_unique<EmuGraph>();
  ++tl_capturing;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  *graph = nullptr;
  if (!stream || !stream->capturing) return set_error(cudaErrorStreamCaptureUnmatched);
  stream->capturing = false;
  --tl_capturing;
  std::unique_ptr<EmuGraph> g = std::move(stream->graph);
  if (stream->invalidated) return set_error(cudaErrorStreamCaptureInvalidated);
  *graph = g.release();
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  const EmuStream& s = stream_of(stream);
  *status = !s.capturing    ? cudaStreamCaptureStatusNone
            : s.invalidated ? cudaStreamCaptureStatusInvalidated
                            : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!graph) return set_error(cudaErrorInvalidValue);
  *exec = new EmuGraph(*graph);
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return set_error(cudaErrorInvalidValue);
  const EmuGraph* g = exec;
  emu::submit_op(stream, [g]() {
    for (const auto& op : g->ops) op();
  });
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = tl_last_error;
  tl_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return tl_last_error; }

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched:
      return "cudaErrorStreamCaptureUnmatched";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    default:
      return cudaGetErrorName(err);
  }
}

}  // namespace nanovllm::cuda_emu
