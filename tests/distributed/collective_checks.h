#pragma once
// Checks every primitive of a Communicator against a plain computation of the expected result:
// each root, f32 / bf16 / i32 (i64 for all_reduce), sizes below, at and off multiples of the
// world size, uneven counts (zeros included), sum / min / max. Shared by the threads test (one
// call per thread) and the MPI worker (one call per process under mpirun). Framework-free:
// returns what failed, one line each.
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "distributed/communicator.h"
#include "distributed/control.h"

namespace nanovllm::test {

// A small integer in [-8, 8]: sums over <= 8 ranks are exact in f32, bf16 and i32.
inline double int_value(int rank, int64_t i, int salt) {
  return double((rank * 131 + i * 7 + salt * 13) % 17) - 8.0;
}

struct HostBuf {
  DType dtype;
  std::vector<char> bytes;
  HostBuf(DType t, int64_t n) : dtype(t), bytes(size_t(n) * dtype_size(t) + 1) {}  // +1: never empty
  int64_t n() const { return int64_t((bytes.size() - 1) / dtype_size(dtype)); }
  Tensor tensor() { return Tensor::contiguous(bytes.data(), dtype, {n()}); }
  void set(int64_t i, double v) {
    char* p = bytes.data() + i * int64_t(dtype_size(dtype));
    switch (dtype) {
      case DType::F32: { float f = float(v); std::memcpy(p, &f, 4); break; }
      case DType::BF16: { uint16_t h = f32_to_bf16(float(v)); std::memcpy(p, &h, 2); break; }
      case DType::I32: { int32_t x = int32_t(v); std::memcpy(p, &x, 4); break; }
      case DType::I64: { int64_t x = int64_t(v); std::memcpy(p, &x, 8); break; }
      case DType::F16: { uint16_t h = f32_to_f16(float(v)); std::memcpy(p, &h, 2); break; }
      default: break;
    }
  }
  double get(int64_t i) const {
    const char* p = bytes.data() + i * int64_t(dtype_size(dtype));
    switch (dtype) {
      case DType::F32: { float f; std::memcpy(&f, p, 4); return f; }
      case DType::BF16: { uint16_t h; std::memcpy(&h, p, 2); return bf16_to_f32(h); }
      case DType::I32: { int32_t x; std::memcpy(&x, p, 4); return x; }
      case DType::I64: { int64_t x; std::memcpy(&x, p, 8); return double(x); }
      case DType::F16: { uint16_t h; std::memcpy(&h, p, 2); return f16_to_f32(h); }
      default: break;
    }
    return 0;
  }
  void fill(double v) { for (int64_t i = 0; i < n(); ++i) set(i, v); }
};

class CollectiveChecks {
 public:
  explicit CollectiveChecks(Communicator& c) : c_(c), r_(c.rank()), p_(c.world_size()) {}

  std::vector<std::string> run_all() {
    const std::vector<int64_t> sizes = {0, 1, int64_t(p_) - 1, 5, 17, 1003};
    const DType dtypes[] = {DType::F32, DType::BF16, DType::I32};
    for (DType t : dtypes) {
      for (int64_t n : sizes) {
        for (int root = 0; root < p_; ++root) {
          broadcast(t, n, root);
          for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max}) reduce(t, n, root, op, false);
          reduce(t, n, root, ReduceOp::Sum, true);
        }
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max}) all_reduce(t, n, op);
      }
      for (int salt = 0; salt < 3; ++salt) {
        auto counts = uneven(salt);
        for (int root = 0; root < p_; ++root) {
          scatter(t, counts, root);
          gather(t, counts, root);
        }
        all_gather(t, counts);
        reduce_scatter(t, counts, ReduceOp::Sum);
        reduce_scatter(t, counts, ReduceOp::Max);
        all_to_all(t, salt);
      }
      even_conveniences(t);
    }
    all_reduce(DType::I64, 1003, ReduceOp::Sum);
    all_reduce_fractional();
    send_recv();
    barrier();
    control_messages();
    return failures_;
  }

 private:
  void expect(const std::string& what, const HostBuf& got, const std::vector<double>& want, double tol = 0) {
    if (got.n() != int64_t(want.size())) {
      failures_.push_back(fmt::format("rank {}: {}: {} elements, expected {}", r_, what, got.n(), want.size()));
      return;
    }
    for (int64_t i = 0; i < got.n(); ++i) {
      double g = got.get(i), w = want[size_t(i)];
      if (!(std::fabs(g - w) <= tol * (1 + std::fabs(w)))) {
        failures_.push_back(fmt::format("rank {} of {}: {}: element {} is {}, expected {}", r_, p_, what, i, g, w));
        return;
      }
    }
  }

  std::vector<int64_t> uneven(int salt) const {
    std::vector<int64_t> counts(static_cast<size_t>(p_));
    for (int r = 0; r < p_; ++r) counts[size_t(r)] = (r * 3 + salt * 5 + 1) % 6;  // 0..5
    return counts;
  }

  static double combine(ReduceOp op, double a, double b) {
    return op == ReduceOp::Sum ? a + b : op == ReduceOp::Min ? std::min(a, b) : std::max(a, b);
  }

  std::vector<double> reduced(int64_t n, int64_t begin, ReduceOp op, int salt) const {
    std::vector<double> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      double acc = int_value(0, begin + i, salt);
      for (int q = 1; q < p_; ++q) acc = combine(op, acc, int_value(q, begin + i, salt));
      want[size_t(i)] = acc;
    }
    return want;
  }

  void broadcast(DType t, int64_t n, int root) {
    HostBuf x(t, n);
    std::vector<double> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      want[size_t(i)] = int_value(root, i, 1);
      x.set(i, r_ == root ? want[size_t(i)] : 99);
    }
    c_.broadcast(x.tensor(), root);
    expect(fmt::format("broadcast {} n={} root={}", dtype_name(t), n, root), x, want);
  }

  void reduce(DType t, int64_t n, int root, ReduceOp op, bool in_place) {
    HostBuf send(t, n), recv(t, n);
    for (int64_t i = 0; i < n; ++i) send.set(i, int_value(r_, i, 2));
    recv.fill(99);
    Tensor out = in_place ? send.tensor() : recv.tensor();
    c_.reduce(send.tensor(), out, root, op);
    if (r_ == root) {
      expect(fmt::format("reduce {} {} n={} root={}{}", reduce_op_name(op), dtype_name(t), n, root,
                         in_place ? " in place" : ""),
             in_place ? send : recv, reduced(n, 0, op, 2));
    }
  }

  void all_reduce(DType t, int64_t n, ReduceOp op) {
    HostBuf x(t, n);
    for (int64_t i = 0; i < n; ++i) x.set(i, int_value(r_, i, 3));
    c_.all_reduce(x.tensor(), op);
    expect(fmt::format("all_reduce {} {} n={}", reduce_op_name(op), dtype_name(t), n), x, reduced(n, 0, op, 3));
  }

  // Non-integer f32 values: the sum order differs by algorithm, so compare with a tolerance.
  void all_reduce_fractional() {
    const int64_t n = 4099;
    HostBuf x(DType::F32, n);
    std::vector<double> want(size_t(n), 0);
    for (int64_t i = 0; i < n; ++i) {
      x.set(i, float(std::sin(double(i + 1) * (r_ + 1)) * 3.7));
      for (int q = 0; q < p_; ++q) want[size_t(i)] += double(float(std::sin(double(i + 1) * (q + 1)) * 3.7));
    }
    c_.all_reduce(x.tensor());
    expect("all_reduce sum f32 fractional n=4099", x, want, 1e-5);
  }

  void scatter(DType t, const std::vector<int64_t>& counts, int root) {
    int64_t total = 0;
    for (int64_t k : counts) total += k;
    HostBuf send(t, total), recv(t, counts[size_t(r_)]);
    int64_t pos = 0;
    for (int q = 0; q < p_; ++q) {
      for (int64_t i = 0; i < counts[size_t(q)]; ++i) send.set(pos++, int_value(q, i, 4));
    }
    recv.fill(99);
    c_.scatter(send.tensor(), recv.tensor(), root, counts);
    std::vector<double> want(size_t(counts[size_t(r_)]));
    for (int64_t i = 0; i < int64_t(want.size()); ++i) want[size_t(i)] = int_value(r_, i, 4);
    expect(fmt::format("scatter {} counts={} root={}", dtype_name(t), fmt::join(counts, ","), root), recv, want);
  }

  void gather(DType t, const std::vector<int64_t>& counts, int root) {
    int64_t total = 0;
    for (int64_t k : counts) total += k;
    HostBuf send(t, counts[size_t(r_)]), recv(t, total);
    for (int64_t i = 0; i < send.n(); ++i) send.set(i, int_value(r_, i, 5));
    recv.fill(99);
    c_.gather(send.tensor(), recv.tensor(), root, counts);
    if (r_ != root) return;
    std::vector<double> want;
    for (int q = 0; q < p_; ++q) {
      for (int64_t i = 0; i < counts[size_t(q)]; ++i) want.push_back(int_value(q, i, 5));
    }
    expect(fmt::format("gather {} counts={} root={}", dtype_name(t), fmt::join(counts, ","), root), recv, want);
  }

  void all_gather(DType t, const std::vector<int64_t>& counts) {
    int64_t total = 0;
    for (int64_t k : counts) total += k;
    HostBuf send(t, counts[size_t(r_)]), recv(t, total);
    for (int64_t i = 0; i < send.n(); ++i) send.set(i, int_value(r_, i, 6));
    recv.fill(99);
    c_.all_gather(send.tensor(), recv.tensor(), counts);
    std::vector<double> want;
    for (int q = 0; q < p_; ++q) {
      for (int64_t i = 0; i < counts[size_t(q)]; ++i) want.push_back(int_value(q, i, 6));
    }
    expect(fmt::format("all_gather {} counts={}", dtype_name(t), fmt::join(counts, ",")), recv, want);
  }

  void reduce_scatter(DType t, const std::vector<int64_t>& counts, ReduceOp op) {
    int64_t total = 0, begin = 0;
    for (int q = 0; q < p_; ++q) {
      if (q < r_) begin += counts[size_t(q)];
      total += counts[size_t(q)];
    }
    HostBuf send(t, total), recv(t, counts[size_t(r_)]);
    for (int64_t i = 0; i < total; ++i) send.set(i, int_value(r_, i, 7));
    recv.fill(99);
    c_.reduce_scatter(send.tensor(), recv.tensor(), counts, op);
    expect(fmt::format("reduce_scatter {} {} counts={}", reduce_op_name(op), dtype_name(t), fmt::join(counts, ",")),
           recv, reduced(counts[size_t(r_)], begin, op, 7));
  }

  // Rank s sends (s + 2 d + salt) % 4 elements to rank d; element i of that chunk is
  // 16 s + 4 d + i % 4 - 20 (distinct per pair, exact in bf16).
  static int64_t a2a_count(int s, int d, int salt) { return (s + 2 * d + salt) % 4; }
  static double a2a_value(int s, int d, int64_t i) { return 16.0 * s + 4.0 * d + double(i % 4) - 20.0; }

  void all_to_all(DType t, int salt) {
    std::vector<int64_t> sc(static_cast<size_t>(p_)), rc(static_cast<size_t>(p_));
    int64_t st = 0, rt = 0;
    for (int q = 0; q < p_; ++q) {
      sc[size_t(q)] = a2a_count(r_, q, salt);
      rc[size_t(q)] = a2a_count(q, r_, salt);
      st += sc[size_t(q)];
      rt += rc[size_t(q)];
    }
    HostBuf send(t, st), recv(t, rt);
    int64_t pos = 0;
    for (int q = 0; q < p_; ++q) {
      for (int64_t i = 0; i < sc[size_t(q)]; ++i) send.set(pos++, a2a_value(r_, q, i));
    }
    recv.fill(99);
    c_.all_to_all(send.tensor(), recv.tensor(), sc, rc);
    std::vector<double> want;
    for (int q = 0; q < p_; ++q) {
      for (int64_t i = 0; i < rc[size_t(q)]; ++i) want.push_back(a2a_value(q, r_, i));
    }
    expect(fmt::format("all_to_all {} salt={}", dtype_name(t), salt), recv, want);
  }

  // The overloads without counts: 4 elements per rank.
  void even_conveniences(DType t) {
    const int64_t k = 4, n = k * p_;
    HostBuf full(t, n), part(t, k);
    for (int64_t i = 0; i < k; ++i) part.set(i, int_value(r_, i, 8));
    c_.all_gather(part.tensor(), full.tensor());
    std::vector<double> want;
    for (int q = 0; q < p_; ++q) {
      for (int64_t i = 0; i < k; ++i) want.push_back(int_value(q, i, 8));
    }
    expect(fmt::format("all_gather even {}", dtype_name(t)), full, want);
    HostBuf mine(t, k);
    c_.reduce_scatter(full.tensor(), mine.tensor());  // every rank holds the same `full`
    std::vector<double> sum(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) sum[size_t(i)] = p_ * int_value(r_, i, 8);
    expect(fmt::format("reduce_scatter even {}", dtype_name(t)), mine, sum);
  }

  void send_recv() {
    if (p_ < 2) return;
    const int right = (r_ + 1) % p_, left = (r_ + p_ - 1) % p_;
    HostBuf out(DType::I32, 7 + r_), in(DType::I32, 7 + left), out2(DType::F32, 3), in2(DType::F32, 3);
    for (int64_t i = 0; i < out.n(); ++i) out.set(i, 1000 * r_ + i);
    out2.fill(r_ + 0.5);
    auto sends = [&] {
      c_.send(out.tensor(), right, 1);
      c_.send(out2.tensor(), right, 2);
    };
    auto recvs = [&] {
      c_.recv(in.tensor(), left, 1);
      c_.recv(in2.tensor(), left, 2);
    };
    if (r_ % 2 == 0) { sends(); recvs(); } else { recvs(); sends(); }
    std::vector<double> want(size_t(in.n())), want2(3, left + 0.5);
    for (int64_t i = 0; i < in.n(); ++i) want[size_t(i)] = 1000 * left + i;
    expect("recv tag 1 from left", in, want);
    expect("recv tag 2 from left", in2, want2);
  }

  // Rank r arrives r * 30 ms late: nobody may leave the barrier before the last one arrived.
  // Each rank's time of leaving is compared with the latest time of arriving (all_reduce max),
  // on steady_clock, one clock for the threads or local processes of this host. (Measuring from
  // the previous barrier instead failed now and then on a loaded 2-core machine: 4 ranks leave
  // it milliseconds apart.) Arrival is read before entering and leaving after returning, so a
  // descheduled rank can only widen the margin.
  void barrier() {
    auto now_us = [] {
      return std::chrono::duration_cast<std::chrono::microseconds>(
                 std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
    c_.barrier();
    std::this_thread::sleep_for(std::chrono::milliseconds(30 * r_));
    const int64_t arrived = now_us();
    c_.barrier();
    const int64_t left = now_us();
    HostBuf last(DType::I64, 1);
    last.set(0, double(arrived));
    c_.all_reduce(last.tensor(), ReduceOp::Max);
    if (double(left) < last.get(0)) {
      failures_.push_back(
          fmt::format("rank {}: barrier returned {:.3f} ms before the last rank arrived", r_,
                      (last.get(0) - double(left)) / 1000.0));
    }
  }

  void control_messages() {
    for (std::string text : {std::string(), std::string("step 7: decode 3 seqs"), std::string(1001, 'x')}) {
      std::string msg = r_ == 0 ? text : std::string("stale");
      broadcast_message(c_, msg, 0);
      if (msg != text) failures_.push_back(fmt::format("rank {}: control message of {} bytes arrived as {} bytes", r_, text.size(), msg.size()));
    }
  }

  Communicator& c_;
  int r_, p_;
  std::vector<std::string> failures_;
};

}  // namespace nanovllm::test
