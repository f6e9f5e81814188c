#pragma once
// WrappedBackend: a Backend that forwards every op to a real one (the CPU backend), for engine
// tests: a hook before each op (to inject a fault, or to watch the shapes), made-up memory
// figures, and fake graphs (a "graph" that replays by calling its record function again, over
// the same fixed buffers, so a test shows the runner refills them in place).
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace nanovllm::test {

class WrappedBackend : public Backend {
 public:
  explicit WrappedBackend(int num_threads = 2)
      : inner_(make_backend({.device = "cpu", .num_threads = num_threads})) {}

  // Called with the op's name (and the number of rows of its first tensor) before each op.
  std::function<void(const std::string& op, int64_t rows)> before_op;
  std::optional<DeviceMemory> fake_memory;  // memory_info() answer, when set
  bool fake_graphs = false;                 // capture_graph returns a replayable fake
  int num_captures = 0;

  DeviceKind device() const override { return inner_->device(); }
  std::string describe() const override { return "wrapped " + inner_->describe(); }
  DType activation_dtype() const override { return inner_->activation_dtype(); }
  Buffer alloc(size_t bytes) override { return inner_->alloc(bytes); }
  void upload(Tensor dst, const void* host) override { inner_->upload(dst, host); }
  void download(void* host, Tensor src) override { inner_->download(host, src); }
  void copy(Tensor dst, Tensor src) override { inner_->copy(dst, src); }
  void fill_zero(Tensor dst) override { inner_->fill_zero(dst); }
  void synchronize() override { inner_->synchronize(); }
  std::vector<bool> profile_windows;  // profile_window's arguments, in order
  void profile_window(bool open) override { profile_windows.push_back(open); }
  LinearWeight make_linear_weight(Tensor w_host) override { return inner_->make_linear_weight(w_host); }

  void embedding(Tensor out, Tensor ids, const LinearWeight& table) override {
    hook("embedding", out);
    inner_->embedding(out, ids, table);
  }
  void vocab_parallel_embedding(Tensor out, Tensor ids, const LinearWeight& table,
                                int64_t vocab_start) override {
    hook("vocab_parallel_embedding", out);
    inner_->vocab_parallel_embedding(out, ids, table, vocab_start);
  }
  void linear(Tensor out, Tensor x, const LinearWeight& w, const Tensor* bias) override {
    hook("linear", out);
    inner_->linear(out, x, w, bias);
  }
  void rms_norm(Tensor out, Tensor x, Tensor weight, float eps) override {
    hook("rms_norm", out);
    inner_->rms_norm(out, x, weight, eps);
  }
  void add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) override {
    hook("add_rms_norm", x);
    inner_->add_rms_norm(x, residual, weight, eps);
  }
  void rope(Tensor x, Tensor positions, Tensor cos_sin) override {
    hook("rope", x);
    inner_->rope(x, positions, cos_sin);
  }
  void silu_and_mul(Tensor out, Tensor x) override {
    hook("silu_and_mul", out);
    inner_->silu_and_mul(out, x);
  }
  void store_kv(Tensor k, Tensor v, const LayerKVCache& cache, const ForwardBatch& batch) override {
    hook("store_kv", k);
    inner_->store_kv(k, v, cache, batch);
  }
  void attention_prefill(Tensor out, Tensor q, const LayerKVCache& cache, const ForwardBatch& batch,
                         float scale) override {
    hook("attention_prefill", out);
    inner_->attention_prefill(out, q, cache, batch, scale);
  }
  void attention_decode(Tensor out, Tensor q, const LayerKVCache& cache, const ForwardBatch& batch,
                        float scale) override {
    hook("attention_decode", out);
    inner_->attention_decode(out, q, cache, batch, scale);
  }
  void gather_rows(Tensor out, Tensor x, Tensor indices) override {
    hook("gather_rows", out);
    inner_->gather_rows(out, x, indices);
  }
  void sample(Tensor out, Tensor logits, const ForwardBatch& batch) override {
    hook("sample", logits);
    inner_->sample(out, logits, batch);
  }
  DeviceMemory memory_info() const override {
    return fake_memory ? *fake_memory : inner_->memory_info();
  }
  std::unique_ptr<DeviceGraph> capture_graph(const std::function<void()>& record) override {
    if (!fake_graphs) return nullptr;
    ++num_captures;
    record();  // a real capture records without running; running it here is harmless
    return std::make_unique<FakeGraph>(record);
  }

 private:
  struct FakeGraph : DeviceGraph {
    explicit FakeGraph(std::function<void()> f) : record(std::move(f)) {}
    void replay() override { record(); }
    std::function<void()> record;
  };
  void hook(const std::string& op, const Tensor& t) {
    if (before_op) before_op(op, t.ndim > 0 ? t.shape[0] : 0);
  }
  std::unique_ptr<Backend> inner_;
};

}  // namespace nanovllm::test
