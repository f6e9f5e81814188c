#pragma once
// make-model: writes a Hugging Face model folder (config.json, generation_config.json, bf16
// safetensors) with deterministic random weights, so that the whole engine can be tested and
// benchmarked without downloading a checkpoint. Tensor names, shapes and config fields are
// exactly those of the Hugging Face Qwen3 / Qwen2 checkpoints.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nanovllm {

struct MakeModelOptions {
  // "tiny": Qwen3, 2 layers, hidden 64, 4 heads, 2 kv heads, head_dim 32 (!= hidden/heads),
  //         intermediate 128, vocab 512, tied embeddings.
  // "tiny-qwen2": Qwen2 with q/k/v biases and an untied lm_head, 2 layers, hidden 64, 4 heads,
  //         2 kv heads (head_dim 16 = hidden/heads), intermediate 96, vocab 384.
  // "qwen3-0.6b": exactly the shapes and config of Qwen/Qwen3-0.6B.
  std::string preset = "tiny";
  // Overrides of the preset (unset: the preset's value).
  std::optional<int> layers, hidden, heads, kv_heads, head_dim, intermediate, vocab;
  std::optional<bool> qkv_bias, tie_embeddings;
  std::string architecture;  // Qwen3/Qwen2/Llama/MistralForCausalLM; empty: the preset's
  uint64_t seed = 0;         // same seed and shapes: byte-identical weights
  int shards = 1;            // > 1: model-0000i-of-0000N.safetensors + model.safetensors.index.json
  std::string out;           // the folder to write (created)
  // A folder holding tokenizer.json (and tokenizer_config.json) to put into the model folder;
  // empty: none. The vocab must cover the tokenizer's ids; bos/eos ids then follow the
  // tokenizer's <|endoftext|> / <|im_end|> as Qwen's configs do.
  std::string tokenizer;
  // The decoder linears as a downloaded quantized checkpoint stores them
  // (model/checkpoint_quantizer.h), round to nearest from the same random bf16 weights: "none",
  // "fp8" (Qwen FP8 blocks of 128 x 128), "awq" (AutoAWQ GEMM 4-bit), "gptq4", "gptq8"
  // (AutoGPTQ symmetric). The embedding, lm_head and norms stay bf16.
  std::string quantization = "none";
  int group_size = 128;  // awq / gptq: k values per scale; must divide every linear's k
  // Modules (substring of the name, as transformers matches them) written unquantized and listed
  // in quantization_config.modules_to_not_convert.
  std::vector<std::string> modules_to_not_convert;
};

// The vocab size of a preset. Throws Error for an unknown preset.
int preset_vocab_size(const std::string& preset);

// Writes the folder. Throws Error for an unknown preset or an invalid combination (the config is
// validated by parse_model_config before any weights are written).
void make_model(const MakeModelOptions& options);

// make-model --from: the bf16 folder `from` (a trained model) written to options.out with its
// decoder linears (the "_proj.weight" tensors not in modules_to_not_convert) as
// options.quantization stores them, by the encoders make_model uses on random weights; every
// other tensor and file copied as it is. So a format's quality can be measured on real weights
// (perplexity --kl-divergence) and its loader tested on them. Throws Error naming the problem:
// no quantization, shape or tokenizer options given, --out the same folder, a folder quantized
// already, a linear that is not 2-d bf16 or whose shape the format cannot hold.
void quantize_model_folder(const std::string& from, const MakeModelOptions& options);

}  // namespace nanovllm
