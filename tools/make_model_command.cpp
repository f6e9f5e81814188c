#include "model/make_model.h"
#include "tools/commands.h"

namespace nanovllm::cli {

void add_make_model(CLI::App& app, Commands& commands) {
  auto* cmd = app.add_subcommand("make-model", "write a Hugging Face model folder with random weights");
  auto o = std::make_shared<MakeModelOptions>();
  cmd->add_option("--preset", o->preset, "tiny, tiny-qwen2 or qwen3-0.6b");
  cmd->add_option("--seed", o->seed, "weights seed");
  cmd->add_option("--out", o->out, "output folder")->required();
  cmd->add_option("--layers", o->layers);
  cmd->add_option("--hidden", o->hidden);
  cmd->add_option("--heads", o->heads);
  cmd->add_option("--kv-heads", o->kv_heads);
  cmd->add_option("--head-dim", o->head_dim);
  cmd->add_option("--intermediate", o->intermediate);
  cmd->add_option("--vocab", o->vocab);
  cmd->add_option("--qkv-bias", o->qkv_bias, "true/false: q/k/v biases");
  cmd->add_option("--tie-embeddings", o->tie_embeddings, "true/false");
  cmd->add_option("--shards", o->shards, "split model.safetensors into this many shards");
  on_run(cmd, commands, [o] {
    make_model(*o);
    return 0;
  });
}

}  // namespace nanovllm::cli
