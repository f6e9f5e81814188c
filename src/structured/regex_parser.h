#pragma once
// A regex as an Expr that matches exactly the strings the regex matches in full (Python's
// re.fullmatch): the common subset of Python re, ECMAScript and PCRE:
//   literals (UTF-8 code points); escapes \n \t \r \f \v \a \0 \xHH \x{H...} \uHHHH \UHHHHHHHH and
//   escaped punctuation; classes [...] [^...] with ranges; \d \w \s \D \W \S (ASCII: [0-9],
//   [A-Za-z0-9_], [ \t\n\r\f\v], as Python's re.ASCII); `.` (any code point but \n); groups ( ),
//   (?: ), (?P<name> ), (?<name> ); alternation |; quantifiers * + ? {m} {m,} {m,n} {,n} and
//   their lazy forms (same language); `{` that starts no quantifier is a literal (as in Python);
//   ^ only at the very start and $ only at the very end.
// Errors name the construct and its position (0-based byte offset): backreferences (\1, \k<..>,
// (?P=..)), lookahead / lookbehind, anchors elsewhere and \b \B \A \Z \z \G, possessive
// quantifiers, atomic groups, inline flags, \p{..}, unbalanced parentheses, nothing to repeat,
// nesting past max_nesting_depth, counts past max_repetition. A regex that matches nothing is
// an Error when the grammar is lowered ("matches no string").
#include <string_view>

#include "structured/grammar_expr.h"
#include "structured/grammar_limits.h"

namespace nanovllm::structured {

Expr parse_regex(std::string_view pattern, const GrammarLimits& limits,
                 const CompileDeadline& deadline);

}  // namespace nanovllm::structured
