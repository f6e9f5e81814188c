#include "structured/compiled_grammar.h"

#include <algorithm>

#include "structured/gbnf_parser.h"
#include "structured/json_schema.h"
#include "structured/lower_grammar.h"
#include "structured/regex_parser.h"
#include "structured/token_vocabulary.h"
#include "util/check.h"

namespace nanovllm::structured {

const char* kind_name(GrammarSpec::Kind kind) {
  switch (kind) {
    case GrammarSpec::Kind::kJsonSchema:
      return "json_schema";
    case GrammarSpec::Kind::kJsonObject:
      return "json_object";
    case GrammarSpec::Kind::kRegex:
      return "regex";
    case GrammarSpec::Kind::kChoice:
      return "choice";
    case GrammarSpec::Kind::kGbnf:
      return "gbnf";
  }
  return "?";
}

CompiledGrammar::CompiledGrammar(std::shared_ptr<const Grammar> grammar,
                                 const GrammarLimits& limits)
    : grammar_(std::move(grammar)), limits_(limits) {}

std::shared_ptr<MaskCache> CompiledGrammar::mask_cache(
    const std::shared_ptr<const TokenVocabulary>& vocab) const {
  std::lock_guard lock(mu_);
  std::shared_ptr<MaskCache> found;
  // Drop the caches of destroyed vocabularies; a live weak_ptr cannot alias a new vocabulary.
  caches_.erase(std::remove_if(caches_.begin(), caches_.end(),
                               [&](const auto& entry) {
                                 std::shared_ptr<const TokenVocabulary> v = entry.first.lock();
                                 if (v && v == vocab) found = entry.second;
                                 return !v;
                               }),
                caches_.end());
  if (!found) {
    found = std::make_shared<MaskCache>(limits_.mask_cache_bytes);
    caches_.emplace_back(vocab, found);
  }
  return found;
}

namespace {

uint32_t choice_rules(const std::vector<std::string>& choices, GrammarBuilder& b) {
  if (choices.empty()) fail("the choice list is empty");
  std::vector<Expr> alts;
  for (const std::string& c : choices) alts.push_back(Expr::literal(c));
  const uint32_t root = b.add_rule("root");
  b.define(root, Expr::choice(std::move(alts)));
  return root;
}

}  // namespace

std::shared_ptr<const CompiledGrammar> compile_grammar(const GrammarSpec& spec,
                                                       const GrammarLimits& limits) {
  const char* kind = kind_name(spec.kind);
  try {
    size_t text_bytes = spec.text.size();
    for (const std::string& c : spec.choices) text_bytes += c.size();
    if (text_bytes > limits.max_text_bytes) {
      fail("grammar limit max_text_bytes ({}) exceeded: the input has {} bytes",
           limits.max_text_bytes, text_bytes);
    }
    const CompileDeadline deadline(limits.max_compile_seconds);
    GrammarBuilder b;
    uint32_t root = 0;
    switch (spec.kind) {
      case GrammarSpec::Kind::kJsonSchema:
        root = json_schema_rules(spec.text, b, limits, deadline);
        break;
      case GrammarSpec::Kind::kJsonObject:
        root = json_object_rules(b);
        break;
      case GrammarSpec::Kind::kRegex: {
        root = b.add_rule("root");
        b.define(root, parse_regex(spec.text, limits, deadline));
        break;
      }
      case GrammarSpec::Kind::kChoice:
        root = choice_rules(spec.choices, b);
        break;
      case GrammarSpec::Kind::kGbnf:
        root = parse_gbnf(spec.text, b, limits, deadline);
        break;
    }
    auto grammar = std::make_shared<const Grammar>(lower_grammar(b, root, limits, deadline));
    if (grammar->rest_need[Grammar::kStart] + 1 > limits.max_stack_depth) {
      fail("grammar limit max_stack_depth ({}) exceeded: every sentence needs {} nested frames",
           limits.max_stack_depth, grammar->rest_need[Grammar::kStart] + 1);
    }
    return std::make_shared<const CompiledGrammar>(std::move(grammar), limits);
  } catch (const Error& e) {
    fail("{}: {}", kind, e.what());
  }
}

}  // namespace nanovllm::structured
