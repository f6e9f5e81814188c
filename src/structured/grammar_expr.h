#pragma once
// The tree form every front end (GBNF, regex, JSON Schema, choice) builds: a rule's right-hand
// side as sequences, choices, literals, code point classes, byte classes, rule references and
// bounded / unbounded repetitions. GrammarBuilder holds the rules by name; lower_grammar.h turns
// them into the flat byte-level Grammar the matcher runs.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/byte_set.h"
#include "structured/code_points.h"

namespace nanovllm::structured {

struct Expr {
  enum class Kind : uint8_t {
    kSequence,    // items in order (no items: the empty string)
    kChoice,      // one of items (no items: matches nothing)
    kBytes,       // the literal bytes `bytes`
    kCodePoints,  // one code point of `code_points`, UTF-8 encoded
    kByteSet,     // one byte of `byte_set`
    kRuleRef,     // the rule `rule`
    kRepeat,      // items[0] repeated min..max times (max == kUnbounded: no maximum)
  };
  static constexpr uint32_t kUnbounded = UINT32_MAX;

  Kind kind = Kind::kSequence;
  std::vector<Expr> items;
  std::string bytes;
  CodePointSet code_points;
  ByteSet byte_set;
  uint32_t rule = 0;
  uint32_t min = 0, max = 0;

  static Expr empty() { return Expr{}; }
  static Expr nothing() { return choice({}); }
  static Expr literal(std::string bytes);
  static Expr chars(CodePointSet set);
  static Expr bytes_of(ByteSet set);
  static Expr ref(uint32_t rule);
  static Expr seq(std::vector<Expr> items);
  static Expr choice(std::vector<Expr> items);
  static Expr repeat(Expr item, uint32_t min, uint32_t max);
  static Expr optional(Expr item) { return repeat(std::move(item), 0, 1); }
  static Expr star(Expr item) { return repeat(std::move(item), 0, kUnbounded); }
  static Expr plus(Expr item) { return repeat(std::move(item), 1, kUnbounded); }
};

// Rules by name, each with an Expr body; ids are indices in declaration order.
class GrammarBuilder {
 public:
  // A new rule named `name`; if taken, `name` gets a suffix "-2", "-3", ... (helper rules).
  uint32_t add_rule(const std::string& name);
  // The rule named `name`, declared (undefined) if new: GBNF's forward references.
  uint32_t rule_named(const std::string& name);
  // -1 if no rule has that name.
  int64_t find_rule(const std::string& name) const;
  void define(uint32_t rule, Expr body);  // precondition: not yet defined
  bool is_defined(uint32_t rule) const { return defined_[rule]; }
  // Valid until the next add_rule / rule_named.
  const std::string& name(uint32_t rule) const { return names_[rule]; }
  const Expr& body(uint32_t rule) const { return bodies_[rule]; }
  uint32_t num_rules() const { return uint32_t(names_.size()); }

 private:
  std::vector<std::string> names_;
  std::vector<Expr> bodies_;
  std::vector<bool> defined_;
  std::unordered_map<std::string, uint32_t> index_;
  std::unordered_map<std::string, int> next_suffix_;  // base name -> the suffix add_rule tries next
};

}  // namespace nanovllm::structured
