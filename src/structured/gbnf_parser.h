#pragma once
// GBNF, the grammar format of llama.cpp (grammars/README.md there), into a GrammarBuilder:
//   name ::= alternatives           names of letters, digits, '-' and '_'; the start rule is `root`
//   "literal"  [class]  [^class]  .  (group)  a | b  x*  x+  x?  x{m}  x{m,}  x{m,n}  x{,n}
//   # comments to the end of the line
// Literals and classes are over Unicode code points (UTF-8 in the output); escapes \n \r \t
// \\ \" \' \[ \] \- \xHH \uHHHH \UHHHHHHHH; `.` is any code point. A newline ends a rule except
// inside parentheses and after `|`.
// Errors name the line and column, or the rule: a syntax error, a rule defined twice, an
// undefined rule ("rule 'x' is not defined (line 3)"), no rule `root`, llama.cpp's token
// references (<...>), a nesting past max_nesting_depth, a repetition past max_repetition.
#include <cstdint>
#include <string_view>

#include "structured/grammar_expr.h"
#include "structured/grammar_limits.h"

namespace nanovllm::structured {

// Returns the id of the rule `root`.
uint32_t parse_gbnf(std::string_view text, GrammarBuilder& builder, const GrammarLimits& limits,
                    const CompileDeadline& deadline);

}  // namespace nanovllm::structured
