#pragma once
// Tiny generated checkpoints shared by the model tests: made once per test binary in a temp dir.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "model/hf_config.h"
#include "model/make_model.h"
#include "nanovllm/config.h"

namespace nanovllm::test {

// Folders made by this test process, removed when it exits.
inline void remove_at_exit(const std::filesystem::path& dir) {
  struct Cleanup {
    std::vector<std::filesystem::path> dirs;
    ~Cleanup() {
      std::error_code ec;
      for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
    }
  };
  static Cleanup cleanup;
  cleanup.dirs.push_back(dir);
}

inline std::string tiny_model(const std::string& preset, uint64_t seed = 1) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() /
                 ("nanovllm-test-" + preset + "-" + std::to_string(seed) + "-" + std::to_string(::getpid()));
  if (!fs::exists(dir / "config.json")) {
    remove_at_exit(dir);
    MakeModelOptions o;
    o.preset = preset;
    o.seed = seed;
    o.out = dir.string();
    make_model(o);
  }
  return dir.string();
}

// A small engine config for tiny models: 16-token blocks, 1 MiB of KV cache, 2 threads.
inline Config tiny_config(const std::string& model) {
  Config c;
  c.model = model;
  c.block_size = 16;
  c.kv_cache_memory = 1 << 20;
  c.max_model_len = 512;
  c.max_num_batched_tokens = 1024;
  c.max_num_seqs = 64;
  c.num_threads = 2;
  c.show_progress = false;
  return c;
}

// Bytes of one KV block (all layers, k and v, bf16) of a model folder.
inline int64_t kv_block_bytes(const std::string& model, int block_size) {
  ModelConfig c = load_model_config(model);
  return int64_t(2) * c.num_hidden_layers * block_size * c.num_key_value_heads * c.head_dim * 2;
}

inline int vocab_size(const std::string& model) { return load_model_config(model).vocab_size; }

}  // namespace nanovllm::test
