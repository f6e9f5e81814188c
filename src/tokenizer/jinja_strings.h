#pragma once
// Python str operations on UTF-8 strings, shared by str methods and filters.
#include <cstdint>
#include <optional>
#include <string>

#include "tokenizer/jinja_value.h"

namespace nanovllm::jinja {

// str.split / str.rsplit: sep none splits on whitespace runs; maxsplit < 0 is unlimited.
List py_split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit, bool from_right);
List py_splitlines(const std::string& s, bool keepends);
// str.strip / lstrip / rstrip: chars none strips whitespace.
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right);
// which: "upper", "lower", "title" or "capitalize".
std::string py_case(const std::string& s, const std::string& which);
// str.replace; count < 0 replaces all.
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);

}  // namespace nanovllm::jinja
