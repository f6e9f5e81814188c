#include "structured/grammar_cache.h"

namespace nanovllm::structured {

GrammarCache::GrammarCache(size_t max_grammars, const GrammarLimits& limits)
    : max_grammars_(max_grammars == 0 ? 1 : max_grammars), limits_(limits) {}

std::string GrammarCache::key_of(const GrammarSpec& spec) {
  // Length-prefixed fields: no two specs share a key.
  std::string key =
      std::to_string(int(spec.kind)) + ":" + std::to_string(spec.text.size()) + ":" + spec.text;
  for (const std::string& c : spec.choices) key += std::to_string(c.size()) + ":" + c;
  return key;
}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(const GrammarSpec& spec) {
  const std::string key = key_of(spec);
  std::promise<std::shared_ptr<const CompiledGrammar>> promise;
  Future future;
  uint64_t id = 0;  // nonzero: this call compiles
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      future = it->second.future;
    } else {
      id = ++next_id_;
      future = promise.get_future().share();
      lru_.push_front(key);
      entries_.emplace(key, Entry{future, lru_.begin(), id});
    }
  }
  if (id != 0) {  // compile outside the lock; waiters block on the future
    std::shared_ptr<const CompiledGrammar> compiled;
    try {
      compiled = compile_grammar(spec, limits_);
    } catch (...) {
      promise.set_exception(std::current_exception());
      std::lock_guard lock(mu_);
      auto it = entries_.find(key);
      if (it != entries_.end() && it->second.id == id) {  // not cached: a later call tries again
        lru_.erase(it->second.lru);
        entries_.erase(it);
      }
    }
    if (compiled) {
      promise.set_value(std::move(compiled));
      std::lock_guard lock(mu_);  // evict once it compiled: a failing spec evicts nothing
      while (entries_.size() > max_grammars_) {
        entries_.erase(lru_.back());
        lru_.pop_back();
      }
    }
  }
  return future.get();
}

size_t GrammarCache::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace nanovllm::structured
