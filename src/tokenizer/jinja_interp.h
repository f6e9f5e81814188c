#pragma once
// The chat-template interpreter: walks the syntax tree with jinja2's scoping (a for-loop
// iteration and a macro call get their own frame; if-blocks do not) and Python's semantics
// for operators. Runtime errors name the template line of the statement that failed.
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/render_limits.h"

namespace nanovllm::jinja {

// Error unless every filter and test the template names exists (jinja2 checks at compile time).
void check_names(const Body& program);

// Renders `program` with the given variables (on top of the globals of make_globals()), within
// `limits` (Error past any of them).
std::string render(const Body& program, std::vector<std::pair<std::string, Value>> vars,
                   const RenderLimits& limits = {});

}  // namespace nanovllm::jinja
