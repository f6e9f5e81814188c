#pragma once
// The one grammar form: a context-free grammar over bytes. A rule is a list of alternatives;
// an alternative is a sequence of elements, each a set of bytes or a reference to a rule.
// Every front end (GBNF, regex, JSON Schema, choice) builds a GrammarBuilder and
// lower_grammar() produces this form, with these guarantees:
//   - every rule reachable from the root can derive some byte string (unproductive
//     alternatives are removed), so a parse that is alive can always be completed;
//   - no rule reaches itself through left corners with a frame to return to (left recursion
//     is an Error), so expanding the left corners of a stack always terminates;
//   - rest_need says how deep a parse stack must grow to finish from any position, so the
//     matcher can refuse, up front, stacks that could not finish within max_stack_depth.
#include <cstdint>
#include <string>
#include <vector>

#include "structured/byte_set.h"

namespace nanovllm::structured {

enum class ElementKind : uint8_t {
  kEnd,      // the end of an alternative
  kByteSet,  // one byte of byte_sets[value]
  kRuleRef,  // the rule rules[value]
};

struct Element {
  ElementKind kind = ElementKind::kEnd;
  uint32_t value = 0;
  bool operator==(const Element&) const = default;
};

struct GrammarRule {
  std::string name;
  std::vector<uint32_t> alternatives;  // position in Grammar::elements of each first element
};

struct Grammar {
  static constexpr uint32_t kStart = 0;  // elements[0..1] = {kRuleRef root, kEnd}
  // [num_elements] every alternative of every rule, each closed by a kEnd.
  std::vector<Element> elements;
  std::vector<ByteSet> byte_sets;  // the sets kByteSet elements name
  std::vector<GrammarRule> rules;
  uint32_t root = 0;
  // [num_elements] the fewest frames above a frame at position p (itself not counted) with
  // which its alternative can be finished: a stack whose frame at depth d has d + rest_need[p]
  // beyond the depth limit can never be completed.
  std::vector<uint32_t> rest_need;

  // A GBNF-like listing ("name ::= [a-c] other | ..."), for messages and tests.
  std::string to_string() const;
};

}  // namespace nanovllm::structured
