#pragma once
// A grammar ready to constrain generation: compile_grammar() turns a GrammarSpec (JSON Schema,
// any JSON object, regex, choice list or GBNF) into the byte-level Grammar, once; matchers of
// every sequence share it. It also owns the per-vocabulary token-mask caches (mask_cache.h).
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "structured/grammar.h"
#include "structured/grammar_limits.h"
#include "structured/mask_cache.h"

namespace nanovllm::structured {

class TokenVocabulary;

struct GrammarSpec {
  enum class Kind {
    kJsonSchema,  // text: a JSON Schema (draft 2020-12 subset, json_schema.h)
    kJsonObject,  // any JSON value whose top level is an object (text unused)
    kRegex,       // text: a regex the whole output must match (regex_parser.h)
    kChoice,      // exactly one of `choices` (text unused)
    kGbnf,        // text: a GBNF grammar as llama.cpp writes it, start rule `root` (gbnf_parser.h)
  };
  Kind kind = Kind::kJsonObject;
  std::string text;
  std::vector<std::string> choices;
};

// "json_schema", "json_object", "regex", "choice", "gbnf".
const char* kind_name(GrammarSpec::Kind kind);

class CompiledGrammar {
 public:
  CompiledGrammar(std::shared_ptr<const Grammar> grammar, const GrammarLimits& limits);

  const Grammar& grammar() const { return *grammar_; }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return grammar_; }
  const GrammarLimits& limits() const { return limits_; }

  // The mask cache of this grammar with `vocab`, made on first use; dropped once `vocab` is
  // destroyed. Thread-safe.
  std::shared_ptr<MaskCache> mask_cache(const std::shared_ptr<const TokenVocabulary>& vocab) const;

 private:
  std::shared_ptr<const Grammar> grammar_;
  GrammarLimits limits_;
  mutable std::mutex mu_;
  mutable std::vector<std::pair<std::weak_ptr<const TokenVocabulary>, std::shared_ptr<MaskCache>>>
      caches_;
};

// Compiles `spec`. Errors (nanovllm::Error) start with the kind ("regex: ...", "json_schema:
// ...", "gbnf: ...") and name the offending keyword, rule, position or limit (a grammar none of
// whose sentences fits max_stack_depth is one).
std::shared_ptr<const CompiledGrammar> compile_grammar(const GrammarSpec& spec,
                                                       const GrammarLimits& limits = {});

}  // namespace nanovllm::structured
