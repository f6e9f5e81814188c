#pragma once
// Backend: the op interface the model is written against, once. A backend owns its device
// memory, streams, handles and thread pool; nothing is global. The scalar fp32 oracle for every
// op is tests/reference/ops_reference.h.
//
// Dtypes: weights are bf16. Activations use the backend's activation_dtype() (CPU: f32, CUDA:
// bf16); every op below that says "act" takes that dtype. The KV cache is bf16 or fp8 (E4M3).
// Shapes use T = tokens in the step, B = sequences, H = hidden, D = head_dim,
// Hq / Hkv = query / key-value heads, I = intermediate, V = vocab.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"
#include "distributed/communicator.h"
#include "runtime/forward_batch.h"
#include "runtime/logprobs.h"
#include "runtime/quant.h"

namespace nanovllm {

// A weight prepared for linear(): logical shape [N, K] (out = x @ w^T), stored in whatever layout
// the backend's GEMM wants (the CPU backend packs it; CUDA keeps row-major). Made once at load.
// quant: bf16 (format None) or the quantized format it was made from (runtime/quant.h).
struct LinearWeight {
  int64_t n = 0;  // output features
  int64_t k = 0;  // input features
  QuantScheme quant;
  Buffer storage;
  Tensor data;    // the backend's view of storage
};

// The experts of one sparse MoE layer (Qwen3-MoE, Mixtral): expert e computes
// down[e](silu(x @ gate[e]^T) * (x @ up[e]^T)) (nano-vllm's packed gate_up, per expert).
struct MoeWeights {
  std::vector<LinearWeight> gate_up;  // E x [2 I, H]: gate rows, then up rows
  std::vector<LinearWeight> down;     // E x [H, I]
  int num_experts() const { return int(gate_up.size()); }
};

// The paged KV cache of one layer: k and v each [num_blocks, block_size, Hkv, D], bf16 or
// F8E4M3 (Config::kv_cache_dtype fp8). fp8 stores the code of x / scale (runtime/fp8.h: nearest
// even, saturating at 448) and reads code * scale; bf16 ignores the scales.
struct LayerKVCache {
  Tensor k;
  Tensor v;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  // Mistral's sliding window: the query at position p attends to keys (p - sliding_window, p]
  // (transformers' sliding_window_overlay); 0: to every key up to p.
  int64_t sliding_window = 0;
};

// Bytes free and in all on the device (CPU: MemAvailable and MemTotal of /proc/meminfo).
struct DeviceMemory {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};

// A recorded sequence of device work replayed as one launch (a CUDA graph). It reads and writes
// the same buffers every replay; the runner refills them in place before calling replay().
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual void replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind device() const = 0;
  virtual std::string describe() const = 0;  // e.g. "cpu (avx512-bf16, 2 threads)"
  virtual DType activation_dtype() const = 0;

  // ---- memory ----
  virtual Buffer alloc(size_t bytes) = 0;                   // uninitialized, 64-byte aligned
  virtual void upload(Tensor dst, const void* host) = 0;    // dst contiguous; host holds dst.nbytes()
  virtual void download(void* host, Tensor src) = 0;        // src contiguous
  virtual void copy(Tensor dst, Tensor src) = 0;            // same shape/dtype; last dim contiguous
  virtual void fill_zero(Tensor dst) = 0;                   // dst contiguous
  virtual void synchronize() = 0;
  // Opens (true) or closes the window an attached profiler records, the device's work before it
  // finished first (CUDA: cudaProfilerStart / Stop, for `ncu --profile-from-start off`); nothing
  // elsewhere.
  virtual void profile_window(bool /*open*/) {}

  // ---- weights ----
  // w: [N, K] bf16 row-major, on the host. Returns it in the backend's GEMM layout.
  virtual LinearWeight make_linear_weight(Tensor w_host) = 0;
  // The same from a quantized weight (runtime/quant.h), repacked into the backend's quantized
  // layout; linear() and the embedding lookups then run on it. A backend without quantized
  // kernels throws Error naming itself.
  virtual LinearWeight make_quantized_linear_weight(const QuantizedWeight& w) {
    fail("{} does not run quantized weights ({}) yet: use --device cpu, or a bf16 checkpoint "
         "without --quantization", describe(), quantization_name(w.scheme));
  }

  // ---- ops ----
  // out[t] = table[ids[t]]   out: act [T, H]; ids: i32 [T]; table: the [V, H] embedding.
  virtual void embedding(Tensor out, Tensor ids, const LinearWeight& table) = 0;
  // One rank's part of a vocab-parallel lookup (nano-vllm's VocabParallelEmbedding): table holds
  // the vocab rows [vocab_start, vocab_start + table.n); out[t] = table[ids[t] - vocab_start] for
  // an id in that range, a zero row for any other id (another rank's row). The caller sums out
  // over the ranks (all_reduce), which gives embedding() of the whole table exactly.
  // out: act [T, H]; ids: i32 [T]; table: [V / tp, H].
  virtual void vocab_parallel_embedding(Tensor out, Tensor ids, const LinearWeight& table,
                                        int64_t vocab_start) = 0;
  // out = x @ w^T (+ bias)   x: act [T, K] (rows may be strided); out: act or f32 [T, N];
  // bias: bf16 [N] or nullptr.
  virtual void linear(Tensor out, Tensor x, const LinearWeight& w, const Tensor* bias) = 0;
  // out = x / sqrt(mean(x^2, -1) + eps) * weight over the last dim.
  // x, out: act [..., D] (2-D or 3-D, outer dims strided, last contiguous; out may alias x);
  // weight: bf16 [D].
  virtual void rms_norm(Tensor out, Tensor x, Tensor weight, float eps) = 0;
  // residual = x + residual; x = rms_norm(residual) * weight  (fused; both in place)
  // x, residual: act [T, H] contiguous; weight: bf16 [H].
  virtual void add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) = 0;
  // Rotate-half (NeoX) RoPE in place over the full head_dim.
  // x: act [T, heads, D] (strided rows); positions: i32 [T];
  // cos_sin: f32 [max_position, D]: cos in [:, :D/2], sin in [:, D/2:].
  virtual void rope(Tensor x, Tensor positions, Tensor cos_sin) = 0;
  // out = silu(x[:, :I]) * x[:, I:]   x: act [T, 2I]; out: act [T, I]  (F.silu(gate) * up)
  virtual void silu_and_mul(Tensor out, Tensor x) = 0;
  // cache.k/v[slot_mapping[t]] = k[t] / v[t]; slot -1 writes nothing.
  // k, v: act [T, Hkv, D] (strided rows).
  virtual void store_kv(Tensor k, Tensor v, const LayerKVCache& cache, const ForwardBatch& batch) = 0;
  // The attention layer's prologue in one call: q and k rms-normed (q_norm / k_norm: bf16 [D], or
  // nullptr for none) and rotated (rope) in place, then store_kv(k, v). CUDA fuses it into one
  // launch; this default runs the separate ops, with the same result.
  virtual void qk_norm_rope_store_kv(Tensor q, Tensor k, Tensor v, const Tensor* q_norm,
                                     const Tensor* k_norm, float eps, Tensor positions,
                                     Tensor cos_sin, const LayerKVCache& cache,
                                     const ForwardBatch& batch) {
    if (q_norm) rms_norm(q, q, *q_norm, eps);
    if (k_norm) rms_norm(k, k, *k_norm, eps);
    rope(q, positions, cos_sin);
    rope(k, positions, cos_sin);
    store_kv(k, v, cache, batch);
  }
  // Causal attention of each sequence's new tokens over its whole context, read from the paged
  // cache (the new tokens' k/v are already stored): query i of seq b sits at position
  // context_len_b - seqlen_q_b + i and attends to keys [0, that position].
  // q: act [T, Hq, D] (strided rows); out: act [T, Hq, D] contiguous. GQA: head h reads kv head
  // h / (Hq / Hkv).
  virtual void attention_prefill(Tensor out, Tensor q, const LayerKVCache& cache,
                                 const ForwardBatch& batch, float scale) = 0;
  // One query per sequence over context_lens[b] cached keys.  q: act [B, Hq, D]; out: act [B, Hq, D].
  virtual void attention_decode(Tensor out, Tensor q, const LayerKVCache& cache,
                                const ForwardBatch& batch, float scale) = 0;
  // Sparse MoE block (vLLM's fused_moe) over the router's logits, per token t:
  //   p = softmax(router_logits[t]) (f32); the top_k experts by p (ties: the lower index);
  //   w_j = p of the j-th of them, divided by their sum when renormalize;
  //   out[t] = sum_j w_j * expert_j(x[t])  (runtime/moe_routing.h gives the routing rule).
  // x: act [T, H] contiguous rows; router_logits: f32 [T, E]; out: act [T, H], not aliasing x.
  // A backend without expert kernels throws Error naming itself.
  virtual void fused_moe(Tensor out, Tensor x, Tensor router_logits, const MoeWeights& experts,
                         int top_k, bool renormalize) {
    fail("{} does not run mixture-of-experts models yet: use --device cpu", describe());
  }
  // out[b] = x[indices[b]]   x: act [T, H]; indices: i32 [B]; out: act [B, H]
  virtual void gather_rows(Tensor out, Tensor x, Tensor indices) = 0;
  // Next token per sequence from logits f32 [B, V] with the batch's sampling fields
  // (see runtime/sampling_rng.h for the exact rule). out: i32 [B]. B may be less than
  // batch.num_seqs (a padded decode batch: the padded lanes' rows are dropped); row b uses the
  // sampling fields of seq b.
  virtual void sample(Tensor out, Tensor logits, const ForwardBatch& batch) = 0;
  // Logprobs of the sampled tokens (SamplingParams::logprobs) by runtime/logprobs.h's rule, from
  // the raw logits f32 [B, V]: for each row b with num_top[b] >= 0, out[b] = the logprob and rank
  // of tokens[b] and the num_top[b] most likely tokens; rows with num_top[b] < 0 are left empty.
  // The default downloads each wanted row and computes on the host (any backend); a backend may
  // do better.
  virtual void compute_logprobs(Tensor logits, const std::vector<int32_t>& tokens,
                                const std::vector<int32_t>& num_top, std::vector<StepLogprobs>& out) {
    const int64_t num = logits.shape[0], v = logits.shape[1];
    out.assign(size_t(num), StepLogprobs{});
    std::vector<float> row(static_cast<size_t>(v));
    for (int64_t b = 0; b < num; ++b) {
      if (num_top[size_t(b)] < 0) continue;
      download(row.data(), logits.slice_rows(b, b + 1));  // f32 [1, V]
      out[size_t(b)] = ::nanovllm::compute_logprobs(row.data(), v, tokens[size_t(b)], num_top[size_t(b)]);
    }
  }
  // Sum over tensor-parallel ranks, in place (single rank: nothing). The default runs the
  // communicator given by set_communicator (src/distributed) on the caller's thread.
  virtual void all_reduce(Tensor x) {
    if (communicator_) communicator_->all_reduce(x);
  }
  // The tensor-parallel group this backend's rank belongs to (nullptr: one rank). Not owned.
  void set_communicator(Communicator* communicator) { communicator_ = communicator; }
  Communicator* communicator() const { return communicator_; }
  // The device this backend runs on (CUDA: its GPU index; CPU: 0) and the stream every op is
  // ordered on (CUDA: its cudaStream_t; CPU: nullptr), for a device communicator (NCCL) that
  // must run in the same order as the ops.
  virtual int device_index() const { return 0; }
  virtual void* native_stream() const { return nullptr; }

  // ---- device memory and graphs ----
  virtual DeviceMemory memory_info() const = 0;
  // Records what `record` enqueues (no allocation, no host sync inside) and returns it for
  // replay; nullptr when the backend has no graphs (the CPU), and the runner then runs eagerly.
  virtual std::unique_ptr<DeviceGraph> capture_graph(const std::function<void()>& record) {
    return nullptr;
  }

 private:
  Communicator* communicator_ = nullptr;
};

struct BackendOptions {
  std::string device = "cpu";  // "cpu" or "cuda"
  int num_threads = 0;         // CPU: 0 = all cores
  int device_index = 0;        // CUDA: which GPU
};

// The registry: the one place that knows which backends exist. Throws Error for an unknown or
// unavailable device.
std::unique_ptr<Backend> make_backend(const BackendOptions& options);

}  // namespace nanovllm
