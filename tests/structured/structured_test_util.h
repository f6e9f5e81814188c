#pragma once
// Helpers of the structured-output tests: a byte vocabulary (token b < 256 is the byte b, 256 is
// EOS), shorthands to compile each kind of grammar, accepts(grammar, bytes) and the message of
// a compile error.
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "structured/compiled_grammar.h"
#include "structured/grammar_matcher.h"
#include "structured/token_vocabulary.h"
#include "util/check.h"

namespace nanovllm::structured::test {

inline std::shared_ptr<const TokenVocabulary> byte_vocab() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
  return std::make_shared<const TokenVocabulary>(bytes, 257, std::vector<int32_t>{256});
}

inline std::shared_ptr<const CompiledGrammar> gbnf(const std::string& text,
                                                   const GrammarLimits& limits = {}) {
  return compile_grammar({GrammarSpec::Kind::kGbnf, text, {}}, limits);
}
inline std::shared_ptr<const CompiledGrammar> regex(const std::string& text) {
  return compile_grammar({GrammarSpec::Kind::kRegex, text, {}});
}
inline std::shared_ptr<const CompiledGrammar> schema(const std::string& text,
                                                     const GrammarLimits& limits = {}) {
  return compile_grammar({GrammarSpec::Kind::kJsonSchema, text, {}}, limits);
}
inline std::shared_ptr<const CompiledGrammar> choice(std::vector<std::string> choices) {
  return compile_grammar({GrammarSpec::Kind::kChoice, "", std::move(choices)});
}

// The bytes are a complete sentence of the grammar.
inline bool accepts(const std::shared_ptr<const CompiledGrammar>& g, std::string_view s) {
  GrammarMatcher m(g, byte_vocab());
  return m.accept_bytes(s) && m.can_end();
}

// The message of the Error compile_grammar throws, or "(compiled)".
inline std::string compile_error(const GrammarSpec& spec, const GrammarLimits& limits = {}) {
  try {
    compile_grammar(spec, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "(compiled)";
}
inline std::string gbnf_error(const std::string& text, const GrammarLimits& limits = {}) {
  return compile_error({GrammarSpec::Kind::kGbnf, text, {}}, limits);
}
inline std::string regex_error(const std::string& text, const GrammarLimits& limits = {}) {
  return compile_error({GrammarSpec::Kind::kRegex, text, {}}, limits);
}
inline std::string schema_error(const std::string& text, const GrammarLimits& limits = {}) {
  return compile_error({GrammarSpec::Kind::kJsonSchema, text, {}}, limits);
}

// Compiles `text` as `kind`: it must compile or throw Error (never crash, hang or throw anything
// else); if it compiles, it takes a short random walk of bytes, each mask checked against the
// naive definition and never empty. 1 if compiled.
inline int fuzz_compile_one(GrammarSpec::Kind kind, const std::string& text, std::mt19937& rng,
                            uint32_t max_stack_depth = GrammarLimits{}.max_stack_depth) {
  const auto vocab = byte_vocab();
  std::vector<uint32_t> mask(size_t(vocab->num_bitmask_words()));
  GrammarLimits limits;
  limits.max_compile_seconds = 2;
  limits.max_stack_depth = max_stack_depth;
  std::shared_ptr<const CompiledGrammar> g;
  try {
    g = compile_grammar({kind, text, {}}, limits);
  } catch (const Error&) {
    return 0;
  }
  GrammarMatcher m(g, vocab);
  for (int step = 0; step < 20 && !m.is_terminated(); ++step) {
    const int allowed = m.fill_next_token_bitmask(mask.data());
    if (allowed == 0) throw std::logic_error("a dead end: " + text);
    for (int32_t t = 0; t < 256; ++t) {
      if (bool((mask[size_t(t) / 32] >> (t % 32)) & 1) !=
          m.can_accept_bytes(std::string(1, char(t)))) {
        throw std::logic_error("a mask differs from the naive definition: " + text);
      }
    }
    int32_t pick = int32_t(rng() % uint32_t(allowed));
    for (int32_t t = 0; t < vocab->vocab_size(); ++t) {
      if (((mask[size_t(t) / 32] >> (t % 32)) & 1) && pick-- == 0) {
        if (!m.accept_token(t)) throw std::logic_error("an allowed token was refused: " + text);
        break;
      }
    }
  }
  return 1;
}

// fuzz_compile_one on `n` random concatenations of `pieces`; returns how many compiled.
inline int fuzz_compile(GrammarSpec::Kind kind, const std::vector<std::string>& pieces, int n,
                        unsigned seed, uint32_t max_stack_depth = GrammarLimits{}.max_stack_depth) {
  std::mt19937 rng(seed);
  int compiled = 0;
  for (int i = 0; i < n; ++i) {
    std::string text;
    const int len = 1 + int(rng() % 12);
    for (int k = 0; k < len; ++k) text += pieces[rng() % pieces.size()];
    compiled += fuzz_compile_one(kind, text, rng, max_stack_depth);
  }
  return compiled;
}

}  // namespace nanovllm::structured::test
