#pragma once
// The checks and the layout that turn lowered rules into a Grammar (see grammar.h for the
// guarantees): productive rules and pruning, nullable rules, the left-recursion check.
#include <cstdint>
#include <vector>

#include "structured/grammar.h"
#include "structured/grammar_limits.h"

namespace nanovllm::structured {

// rules_alternatives[r]: the alternatives of rule r as element runs (no kEnd), for every rule of
// `g` (g.rules and g.byte_sets filled, g.elements empty). Removes the alternatives that cannot
// derive any string, checks for left recursion, and lays out g.elements.
// Errors: "matches no string" (the root derives nothing), "left recursion in rule 'x'".
void finish_grammar(Grammar& g, std::vector<std::vector<std::vector<Element>>>& rules_alternatives,
                    const CompileDeadline& deadline);

}  // namespace nanovllm::structured
