#pragma once
// An independent, plain fp32 Qwen3/Qwen2/Llama/Mistral/Qwen3-MoE/Mixtral forward: no paging, no batching, no backend, no fused
// weights; every weight read from the checkpoint and widened to float. The oracle for the engine.
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "model/hf_config.h"
#include "runtime/quant.h"

namespace nanovllm::ref {

// Where the forward rounds. kFp32: nowhere (the plain oracle). kBf16Storage: values are rounded
// to bf16 exactly where the engine stores or feeds them as bf16 -- every GEMM input and the K/V
// written to the cache -- and everything else stays fp32. Greedy decoding of random-weight
// models meets near-ties (top-2 gaps of ~1e-3) that bf16 storage alone can flip; with the same
// rounding points only summation order differs, so greedy ids must match exactly.
// kBf16StorageFp8Kv: kBf16Storage with an fp8 KV cache of unit scales (the tiny models carry no
// k/v scales): K and V are rounded to E4M3 (runtime/fp8.h) from their unrounded f32 values, as
// the CPU engine stores them.
enum class Precision { kFp32, kBf16Storage, kBf16StorageFp8Kv };

class ReferenceModel {
 public:
  // quant: the checkpoint's linears and embedding / lm_head replaced by their quantization
  // (runtime/quant.h quantize_rtn, the format's definition; the table by
  // embedding_quantization) dequantized to f32, and every GEMM input rounded where the
  // quantized GEMM rounds it (instead of bf16): for int8 weights per row to the int16 grid of
  // scale max|x| / 16383, for int4 weights per group of k to int8 codes of scale
  // max|x_group| / 127. A checkpoint stored quantized (config.json quantization_config: fp8,
  // awq, gptq) has its quantized linears dequantized by reference/quantized_reference.h, their
  // inputs rounded the same way (4-bit awq / gptq in their groups); its other weights (embedding, lm_head, norms, unconverted linears) are as
  // stored, their GEMM inputs as `precision` says. quant must then be none.
  explicit ReferenceModel(const std::string& folder, Precision precision = Precision::kFp32,
                          QuantScheme quant = {});

  // Logits f32 [V] of the last token of `tokens` (full causal forward over all of them).
  std::vector<float> last_logits(const std::vector<int32_t>& tokens) const;
  // Logits f32 [T, V] of every token of `tokens` (row t: the prediction after tokens[0..t]).
  std::vector<std::vector<float>> all_logits(const std::vector<int32_t>& tokens) const;
  // Greedy continuation: n tokens (argmax, lowest index on ties), no eos stop. gaps (optional)
  // receives, per step, the top-1 minus top-2 logit divided by the largest |logit|; for a MoE
  // model the smaller of that and the step's router margin (below): a router that nearly picked
  // another expert is as much a near-tie as two nearly equal logits. Remembered per prompt (the
  // engine tests hold several runs of the same prompts against it; each step is a full forward).
  std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int n,
                              std::vector<double>* gaps = nullptr) const;

  const ModelConfig& config() const { return config_; }

 private:
  using GemmInput = std::function<std::vector<float>(const std::vector<float>&, const std::string&)>;
  const std::vector<float>& w(const std::string& name) const;
  // x += the sparse MoE block of layer `layer` on the token's residual x.
  void moe_block(int layer, std::vector<float>& x, const GemmInput& gemm_in) const;
  // How the engine's GEMM of `weight` rounds its x: 0 bf16 storage or none (float weights, by
  // `precision`), -1 the int16 grid of each row (int8 weights), G > 0 int8 codes in groups of G
  // along k (int4 weights).
  int64_t x_grid(const std::string& weight) const;
  std::vector<std::vector<float>> logits_at(const std::vector<int32_t>& tokens, const std::vector<size_t>& rows) const;
  ModelConfig config_;
  Precision precision_;
  QuantScheme quant_;
  std::map<std::string, std::vector<float>> weights_;
  std::set<std::string> stored_quantized_;  // weights the checkpoint stores quantized
  std::map<std::string, int64_t> stored_int4_group_;  // ... of them the 4-bit ones: their group
  // The last forward's router margin: over its tokens and sparse layers, the smallest k-th minus
  // (k+1)-th router logit divided by the token's largest |router logit| (1e300: no router).
  mutable double router_gap_ = 1e300;
  // greedy()'s longest continuation of each prompt so far, with its gaps.
  struct Continuation {
    std::vector<int32_t> tokens;
    std::vector<double> gaps;
  };
  mutable std::map<std::vector<int32_t>, Continuation> greedy_memo_;
  mutable std::mutex greedy_mu_;
};

}  // namespace nanovllm::ref
