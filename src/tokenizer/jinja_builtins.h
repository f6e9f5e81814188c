#pragma once
// What the chat-template interpreter can call: attribute and item access with jinja2's
// sandboxed lookup rules, the str/dict/list methods (jinja_methods.cpp), filters and tests
// (jinja_filters.cpp, jinja_tests.cpp) and the globals transformers provides.
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"
#include "util/check.h"

namespace nanovllm::jinja {

// raise_exception(message): the template's own error, passed on with the message unchanged.
class RaisedError : public Error {
 public:
  using Error::Error;
};

// obj.name: a method of str/dict/list, else a dict key / namespace attribute, else undefined.
// obj must not be undefined (the caller raises the undefined error).
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: item (negative indices count from the end), else attribute, else undefined.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] for str, list and tuple; absent parts are none/undefined.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Python iter(v): list/tuple items, dict keys, str characters; undefined iterates as empty.
std::vector<Value> iterate(const Value& v);
// Python `item in container`.
bool contains(const Value& container, const Value& item);

bool has_filter(const std::string& name);
Value apply_filter(const std::string& name, const Value& v, const Args& args);
bool has_test(const std::string& name);
bool apply_test(const std::string& name, const Value& v, const Args& args);

// The names every template sees: range, namespace, dict, raise_exception, strftime_now.
std::vector<std::pair<std::string, Value>> make_globals();

// a op b for op in + - * / // % ** (Python semantics; operands are not undefined).
Value binary_op(const std::string& op, const Value& a, const Value& b);

// Helpers shared by the builtins.
void check_args(const Args& args, const char* what, size_t max_pos, std::initializer_list<const char*> kw_names);
std::string str_arg(const Value& v, const char* what);
int64_t int_arg(const Value& v, const char* what);
Value call(const Value& fn, Args args);  // calls a callable; Error for anything else

}  // namespace nanovllm::jinja
