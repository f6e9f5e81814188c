#pragma once
// Filters shared between jinja_filters.cpp (the table, string and number filters) and
// jinja_filters_seq.cpp (sequence filters). Each filter is f(value, args).
#include <string>

#include "tokenizer/jinja_builtins.h"

namespace nanovllm::jinja {

// The argument at position i or named `name`, else dflt (by value: dflt is often a temporary).
Value arg_or(const Args& a, size_t i, const char* name, Value dflt);
// A dotted attribute path ("a.b", "tags.0") looked up as jinja2's make_attrgetter does.
Value attr_path(const Value& item, const std::string& path);

Value f_items(const Value& v, const Args& a);
Value f_dictsort(const Value& v, const Args& a);
Value f_sort(const Value& v, const Args& a);
Value f_reverse(const Value& v, const Args& a);
Value f_unique(const Value& v, const Args& a);
Value f_sum(const Value& v, const Args& a);
Value f_max(const Value& v, const Args& a);
Value f_min(const Value& v, const Args& a);
Value f_map(const Value& v, const Args& a);
Value f_select(const Value& v, const Args& a);
Value f_reject(const Value& v, const Args& a);
Value f_selectattr(const Value& v, const Args& a);
Value f_rejectattr(const Value& v, const Args& a);

}  // namespace nanovllm::jinja
