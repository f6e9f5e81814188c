// `nanovllm bench-comm`: times each communication primitive over message sizes and prints
// algorithm bandwidth and bus bandwidth by nccl-tests' rules:
//   algbw = S / t, S = the size column (all_gather / gather: the gathered total; reduce_scatter /
//   scatter: the full input; all_to_all: what one rank sends), busbw = algbw * factor with
//   factor 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter, all_to_all, scatter
//   and gather, 1 for broadcast, reduce and send_recv: busbw is what each rank's link carries.
// Backends: threads (--world-size ranks as threads), mpi (run under mpirun), nccl (GPU).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>

#include "backend/backend.h"
#include "distributed/mpi_communicator.h"
#include "distributed/nccl_communicator.h"
#include "distributed/thread_communicator.h"
#include "tools/commands.h"
#include "util/check.h"

namespace nanovllm::cli {

namespace {

struct BenchCommOptions {
  std::string backend = "threads";
  int world_size = 2;
  std::string min_bytes = "1K";
  std::string max_bytes = "256M";
  std::string ops = "all";
  std::string dtype = "f32";
  int max_iters = 50;
  double target_ms = 100;
};

const char* kAllOps[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                         "scatter", "gather", "all_to_all", "send_recv", "barrier"};

int64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit(end);
  int64_t mul = unit.empty() || unit == "B" ? 1
              : unit == "K" || unit == "KiB" ? int64_t(1) << 10
              : unit == "M" || unit == "MiB" ? int64_t(1) << 20
              : unit == "G" || unit == "GiB" ? int64_t(1) << 30 : 0;
  if (end == s.c_str() || mul == 0 || v <= 0) fail("bench-comm: bad size '{}' (examples: 1K, 64M, 1G)", s);
  return int64_t(v * double(mul));
}

std::string human(int64_t bytes) {
  if (bytes >= (int64_t(1) << 20)) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all" || op == "scatter" ||
      op == "gather") {
    return double(n - 1) / n;
  }
  return 1.0;
}

DType parse_dtype(const std::string& s) {
  if (s == "f32") return DType::F32;
  if (s == "bf16") return DType::BF16;
  if (s == "i32") return DType::I32;
  fail("bench-comm: --dtype {} (expected f32, bf16 or i32)", s);
}

std::vector<std::string> parse_ops(const std::string& s) {
  if (s == "all") return {std::begin(kAllOps), std::end(kAllOps)};
  std::vector<std::string> ops;
  std::stringstream in(s);
  for (std::string op; std::getline(in, op, ',');) {
    if (std::find(std::begin(kAllOps), std::end(kAllOps), op) == std::end(kAllOps)) {
      fail("bench-comm: unknown primitive '{}' in --ops", op);
    }
    ops.push_back(op);
  }
  return ops;
}

// Two buffers of max_bytes on the communicator's device (host memory, or the GPU for nccl).
struct RankBuffers {
  std::unique_ptr<Backend> device;  // nccl only
  Buffer send_dev, recv_dev;
  std::vector<char> send_host, recv_host;
  void* send = nullptr;
  void* recv = nullptr;
  DeviceKind kind = DeviceKind::CPU;
};

RankBuffers make_buffers(Communicator& c, int64_t bytes, int cuda_device) {
  RankBuffers b;
  if (std::string(c.backend_name()) == "nccl") {
    b.device = make_backend({.device = "cuda", .num_threads = 0, .device_index = cuda_device});
    b.send_dev = b.device->alloc(size_t(bytes));
    b.recv_dev = b.device->alloc(size_t(bytes));
    b.send = b.send_dev.data();
    b.recv = b.recv_dev.data();
    b.kind = DeviceKind::CUDA;
    b.device->fill_zero(Tensor::contiguous(b.send, DType::I32, {bytes / 4}, DeviceKind::CUDA));
    b.device->fill_zero(Tensor::contiguous(b.recv, DType::I32, {bytes / 4}, DeviceKind::CUDA));
    b.device->synchronize();
  } else {
    b.send_host.assign(size_t(bytes), 0);  // touched now: no page faults inside the timing
    b.recv_host.assign(size_t(bytes), 0);
    b.send = b.send_host.data();
    b.recv = b.recv_host.data();
  }
  return b;
}

// One call of `op` on `count` elements (count divisible by the world size).
void run_op(Communicator& c, const std::string& op, RankBuffers& b, DType t, int64_t count) {
  const int p = c.world_size();
  auto T = [&](void* data, int64_t n) { return Tensor::contiguous(data, t, {n}, b.kind); };
  if (op == "all_reduce") c.all_reduce(T(b.send, count));
  else if (op == "all_gather") c.all_gather(T(b.send, count / p), T(b.recv, count));
  else if (op == "reduce_scatter") c.reduce_scatter(T(b.send, count), T(b.recv, count / p));
  else if (op == "broadcast") c.broadcast(T(b.send, count), 0);
  else if (op == "reduce") c.reduce(T(b.send, count), T(b.recv, count), 0);
  else if (op == "scatter") c.scatter(T(b.send, count), T(b.recv, count / p), 0);
  else if (op == "gather") c.gather(T(b.send, count / p), T(b.recv, count), 0);
  else if (op == "all_to_all") c.all_to_all(T(b.send, count), T(b.recv, count));
  else if (op == "send_recv") {
    // Ring shift: each rank sends `count` to its right and receives as much from its left;
    // even ranks send first so that blocking (rendezvous) sends cannot deadlock.
    if (p == 1) return;
    int right = (c.rank() + 1) % p, left = (c.rank() + p - 1) % p;
    if (c.rank() % 2 == 0) {
      c.send(T(b.send, count), right);
      c.recv(T(b.recv, count), left);
    } else {
      c.recv(T(b.recv, count), left);
      c.send(T(b.send, count), right);
    }
  } else if (op == "barrier") c.barrier();
  c.synchronize();
}

// Seconds per call of op: rank 0 picks the iteration count from one timed call, every rank
// times the loop, the slowest rank's time counts.
std::pair<double, int> time_op(Communicator& c, const std::string& op, RankBuffers& b, DType t,
                               int64_t count, const BenchCommOptions& o) {
  using clock = std::chrono::steady_clock;
  run_op(c, op, b, t, count);  // warm-up
  c.barrier();
  auto t0 = clock::now();
  run_op(c, op, b, t, count);
  double one = std::chrono::duration<double>(clock::now() - t0).count();
  int32_t iters = std::clamp(int32_t(o.target_ms * 1e-3 / std::max(one, 1e-7)), 1, o.max_iters);
  c.broadcast(Tensor::contiguous(&iters, DType::I32, {1}), 0);
  c.barrier();
  t0 = clock::now();
  for (int i = 0; i < iters; ++i) run_op(c, op, b, t, count);
  int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0).count();
  c.all_reduce(Tensor::contiguous(&ns, DType::I64, {1}), ReduceOp::Max);
  return {double(ns) * 1e-9 / iters, iters};
}

void bench_rank(Communicator& c, const BenchCommOptions& o, int cuda_device) {
  const DType t = parse_dtype(o.dtype);
  const int64_t lo = parse_bytes(o.min_bytes), hi = parse_bytes(o.max_bytes);
  const auto ops = parse_ops(o.ops);
  const int p = c.world_size();
  const bool print = c.rank() == 0;
  RankBuffers b = make_buffers(c, hi, cuda_device);
  if (print) {
    std::printf("# bench-comm: %s, world size %d, %s, sizes %s..%s, up to %d iterations or ~%.0f ms per size\n",
                c.backend_name(), p, dtype_name(t), human(lo).c_str(), human(hi).c_str(), o.max_iters,
                o.target_ms);
    std::printf("# algbw = size / time; busbw = algbw * factor (nccl-tests): all_reduce 2(n-1)/n = %.2f; "
                "all_gather, reduce_scatter, all_to_all, scatter, gather (n-1)/n = %.2f; broadcast, "
                "reduce, send_recv 1\n", bus_factor("all_reduce", p), bus_factor("all_gather", p));
  }
  for (const auto& op : ops) {
    if (print) {
      std::printf("\n## %s  [%s]\n", op.c_str(), c.algorithm(op.c_str()).c_str());
      if (op == "barrier") std::printf("%10s %10s\n", "iters", "time(us)");
      else std::printf("%10s %12s %6s %12s %12s %12s\n", "size", "count", "iters", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
    }
    if (op == "barrier") {
      auto [sec, iters] = time_op(c, op, b, t, 0, o);
      if (print) std::printf("%10d %10.2f\n", iters, sec * 1e6);
      continue;
    }
    double best = 0;
    int64_t best_bytes = 0;
    for (int64_t bytes = lo; bytes <= hi; bytes *= 2) {
      int64_t count = bytes / int64_t(dtype_size(t)) / p * p;  // divisible by the world size
      if (count == 0) continue;
      auto [sec, iters] = time_op(c, op, b, t, count, o);
      int64_t size = count * int64_t(dtype_size(t));
      double algbw = double(size) / sec * 1e-9, busbw = algbw * bus_factor(op, p);
      if (busbw > best) best = busbw, best_bytes = size;
      if (print) {
        std::printf("%10s %12lld %6d %12.2f %12.3f %12.3f\n", human(size).c_str(), (long long)count, iters,
                    sec * 1e6, algbw, busbw);
        std::fflush(stdout);
      }
    }
    if (print && best > 0) {
      std::printf("peak busbw %.2f GB/s at %s: each rank moved %.2f x %s per call\n", best,
                  human(best_bytes).c_str(), bus_factor(op, p), human(best_bytes).c_str());
    }
  }
}

int local_rank() {
  const char* s = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return s ? std::atoi(s) : 0;
}

int run_bench_comm(const BenchCommOptions& o) {
  parse_ops(o.ops);  // fail on bad flags before any rank starts
  parse_dtype(o.dtype);
  if (parse_bytes(o.min_bytes) > parse_bytes(o.max_bytes)) fail("bench-comm: --min-bytes above --max-bytes");
  if (o.max_iters < 1) fail("bench-comm: --max-iters must be >= 1");
  if (o.backend == "mpi" || (o.backend == "nccl" && launched_by_mpirun())) {
    auto mpi = make_mpi_communicator();
    if (o.backend == "mpi") {
      bench_rank(*mpi, o, 0);
    } else {
      auto nccl = make_nccl_communicator(mpi.get(), local_rank());
      bench_rank(*nccl, o, local_rank());
    }
    return 0;
  }
  if (o.backend != "threads" && o.backend != "nccl") {
    fail("bench-comm: --backend {} (expected threads, mpi or nccl)", o.backend);
  }
  if (o.world_size < 1) fail("bench-comm: --world-size must be >= 1");
  // threads, or nccl with one thread per GPU (rank r on GPU r) bootstrapped by threads.
  auto group = make_thread_group(o.world_size);
  std::vector<std::string> errors(static_cast<size_t>(o.world_size));
  std::vector<std::thread> ranks;
  for (int r = 0; r < o.world_size; ++r) {
    ranks.emplace_back([&, r] {
      try {
        auto comm = make_thread_communicator(group, r);
        if (o.backend == "nccl") {
          auto nccl = make_nccl_communicator(comm.get(), r);
          bench_rank(*nccl, o, r);
        } else {
          bench_rank(*comm, o, 0);
        }
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < o.world_size; ++r) {
    if (!errors[size_t(r)].empty()) fail("bench-comm rank {}: {}", r, errors[size_t(r)]);
  }
  return 0;
}

}  // namespace

void add_bench_comm(CLI::App& app, Commands& commands) {
  auto* cmd = app.add_subcommand("bench-comm", "time each communication primitive over message sizes");
  auto o = std::make_shared<BenchCommOptions>();
  cmd->add_option("--backend", o->backend, "threads (default), mpi (under mpirun) or nccl");
  cmd->add_option("--world-size", o->world_size, "ranks for threads / nccl without mpirun (default 2)");
  cmd->add_option("--min-bytes", o->min_bytes, "smallest message, e.g. 1K (default)");
  cmd->add_option("--max-bytes", o->max_bytes, "largest message, e.g. 256M (default); caps the run time");
  cmd->add_option("--ops", o->ops, "comma-separated primitives, or all (default)");
  cmd->add_option("--dtype", o->dtype, "f32 (default), bf16 or i32");
  cmd->add_option("--max-iters", o->max_iters, "timed calls per size at most (default 50)");
  cmd->add_option("--target-ms", o->target_ms, "aim for this much timed work per size (default 100)");
  on_run(cmd, commands, [o] { return run_bench_comm(*o); });
}

}  // namespace nanovllm::cli
