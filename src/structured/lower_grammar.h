#pragma once
// GrammarBuilder (trees of sequences, choices, classes, repetitions) -> Grammar (flat, bytes).
#include <cstdint>

#include "structured/grammar.h"
#include "structured/grammar_expr.h"
#include "structured/grammar_limits.h"

namespace nanovllm::structured {

// Lowers every rule of `builder` reachable or not, with `root` as the start rule:
//   - literals become runs of single bytes; code point classes become one byte set when ASCII,
//     else a helper rule of UTF-8 byte-range sequences;
//   - a nested choice becomes a helper rule "<rule>-<n>"; x{m,n} becomes m copies of x and a
//     chain of n - m helper rules "x-opt" (opt_k ::= x opt_k-1 | empty); x{m,} becomes m copies
//     and "x-star" (star ::= x star | empty), whose recursion is a tail call (no stack growth).
// Errors (nanovllm::Error): a referenced rule that is not defined ("rule 'x' is not defined"),
// left recursion ("left recursion in rule 'x'"), a grammar whose root derives nothing
// ("matches no string"), and the limits max_rules, max_elements, max_repetition and
// max_compile_seconds, each by name.
Grammar lower_grammar(const GrammarBuilder& builder, uint32_t root, const GrammarLimits& limits,
                      const CompileDeadline& deadline);

}  // namespace nanovllm::structured
