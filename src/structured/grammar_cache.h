#pragma once
// Compiled grammars by spec (kind, text, choices), so that requests with the same schema share
// one CompiledGrammar and its token-mask caches. Bounded: past max_grammars the least recently
// used is dropped (its matchers keep it alive); memory is at most max_grammars times
// limits.mask_cache_bytes (512 MB with the defaults, far less in practice). Thread-safe;
// concurrent requests for the same spec compile it once (the others wait). Compile errors are
// not cached.
#include <cstddef>
#include <cstdint>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "structured/compiled_grammar.h"

namespace nanovllm::structured {

class GrammarCache {
 public:
  explicit GrammarCache(size_t max_grammars = 32, const GrammarLimits& limits = {});

  // The compiled grammar of `spec` (compiled now if absent). Throws compile_grammar's Errors.
  std::shared_ptr<const CompiledGrammar> get(const GrammarSpec& spec);
  size_t size() const;

 private:
  using Future = std::shared_future<std::shared_ptr<const CompiledGrammar>>;
  struct Entry {
    Future future;
    std::list<std::string>::iterator lru;  // position in lru_
    uint64_t id;                           // which get() made it
  };
  static std::string key_of(const GrammarSpec& spec);

  size_t max_grammars_;
  GrammarLimits limits_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // most recent first
  uint64_t next_id_ = 0;
};

}  // namespace nanovllm::structured
