#include "structured/json_schema.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <string_view>

#include "structured/json_schema_compiler.h"
#include "util/check.h"

namespace nanovllm::structured {

namespace {

constexpr std::array<std::string_view, 15> kAnnotations = {"$schema",        "$id",
                                                           "$comment",       "title",
                                                           "description",    "default",
                                                           "examples",       "deprecated",
                                                           "readOnly",       "writeOnly",
                                                           "$defs",          "definitions",
                                                           "$anchor",        "contentMediaType",
                                                           "contentEncoding"};
constexpr std::array<std::string_view, 7> kComposition = {"$ref", "allOf", "anyOf", "oneOf",
                                                          "enum", "const", "type"};
constexpr std::array<std::string_view, 7> kTypes = {"null",   "boolean", "object", "array",
                                                    "number", "integer", "string"};

struct TypeKeywords {
  std::string_view type;
  std::array<std::string_view, 5> keywords;  // "" pads
};
// Keywords each type's grammar reads (the type is inferred from them when "type" is absent).
constexpr std::array<TypeKeywords, 4> kTypeKeywords = {{
    {"object", {"properties", "required", "additionalProperties", "unevaluatedProperties", ""}},
    {"array", {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"}},
    {"string", {"minLength", "maxLength", "pattern", "format", ""}},
    {"number", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", ""}},
}};

template <size_t N>
bool contains(const std::array<std::string_view, N>& a, std::string_view key) {
  return !key.empty() && std::find(a.begin(), a.end(), key) != a.end();
}

bool is_type_keyword(std::string_view key) {
  for (const TypeKeywords& t : kTypeKeywords) {
    if (contains(t.keywords, key)) return true;
  }
  return false;
}

bool value_has_type(const Json& v, const std::string& type) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  // integer: an integral number (1.0 is an integer in draft 2020-12)
  return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                   std::floor(v.get<double>()) == v.get<double>());
}

std::string pointer_unescape(const std::string& token, const std::string& ref) {
  std::string out;
  for (size_t i = 0; i < token.size(); ++i) {
    if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
      out += token[i + 1] == '0' ? '~' : '/';
      ++i;
    } else if (token[i] == '%' && i + 2 < token.size() && std::isxdigit(uint8_t(token[i + 1])) &&
               std::isxdigit(uint8_t(token[i + 2]))) {
      out += char(std::stoi(token.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else if (token[i] == '~') {
      fail("bad JSON pointer escape in $ref '{}'", ref);
    } else {
      out += token[i];
    }
  }
  return out;
}

std::string rule_name_part(const std::string& key) {
  std::string out;
  for (char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    out += ok ? c : '-';
  }
  if (out.size() > 40) out.resize(40);
  return out.empty() ? "x" : out;
}

}  // namespace

std::string at_path(const std::string& path) { return path.empty() ? "at the root" : "at " + path; }

std::string child_path(const std::string& path, const std::string& key) {
  std::string out = path + "/";
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

SchemaCompiler::SchemaCompiler(const Json& root, GrammarBuilder& b, const GrammarLimits& limits,
                               const CompileDeadline& deadline)
    : root_(root), b_(b), json_(b), limits_(limits), deadline_(deadline) {}

uint32_t SchemaCompiler::define(const std::string& name, Expr body) {
  const uint32_t r = b_.add_rule(name);
  b_.define(r, std::move(body));
  return r;
}

uint32_t SchemaCompiler::compile() {
  const uint32_t root = b_.add_rule("root");
  b_.define(root, schema_expr(root_, "", "root", 0));
  // $ref targets, compiled from a flat worklist: a chain of references never deepens the stack.
  while (!pending_.empty()) {
    auto [rule, ref] = pending_.back();
    pending_.pop_back();
    const Json* target = &root_;
    std::string path;
    size_t pos = 1;  // after '#'
    while (pos < ref.size()) {
      if (ref[pos] != '/') fail("$ref '{}' is not a JSON pointer", ref);
      const size_t next = std::min(ref.find('/', pos + 1), ref.size());
      const std::string token = pointer_unescape(ref.substr(pos + 1, next - pos - 1), ref);
      if (target->is_object() && target->contains(token)) {
        target = &(*target)[token];
      } else if (target->is_array() && !token.empty() &&
                 token.find_first_not_of("0123456789") == std::string::npos && token.size() < 10 &&
                 std::stoul(token) < target->size()) {
        target = &(*target)[std::stoul(token)];
      } else {
        fail("$ref '{}' points to nothing", ref);
      }
      path = child_path(path, token);
      pos = next;
    }
    const std::string name = b_.name(rule);  // a copy: adding rules moves the builder's names
    b_.define(rule, schema_expr(*target, path, name, 0));
  }
  return root;
}

uint32_t SchemaCompiler::ref_rule(const std::string& ref, const std::string& path) {
  if (ref.empty() || ref[0] != '#')
    fail("$ref '{}' {}: only local references (\"#...\") are supported", ref, at_path(path));
  auto it = ref_rules_.find(ref);
  if (it != ref_rules_.end()) return it->second;
  const size_t slash = ref.rfind('/');
  const uint32_t r =
      b_.add_rule(slash == std::string::npos ? "root" : rule_name_part(ref.substr(slash + 1)));
  ref_rules_.emplace(ref, r);
  pending_.emplace_back(r, ref);
  return r;
}

uint32_t SchemaCompiler::schema_rule(const Json& s, const std::string& path,
                                     const std::string& name, uint32_t depth) {
  if (s.is_object() && s.size() == 1 && s.contains("$ref") && s["$ref"].is_string()) {
    return ref_rule(s["$ref"].get<std::string>(), path);  // no rule of its own needed
  }
  return define(name, schema_expr(s, path, name, depth));
}

Expr SchemaCompiler::schema_expr(const Json& s, const std::string& path, const std::string& name,
                                 uint32_t depth) {
  if (depth > limits_.max_nesting_depth) {
    fail("grammar limit max_nesting_depth ({}) exceeded {}", limits_.max_nesting_depth,
         at_path(path));
  }
  deadline_.check();
  if (s.is_boolean()) return s.get<bool>() ? Expr::ref(json_.value()) : Expr::nothing();
  if (!s.is_object()) fail("schema {} is not an object or a boolean", at_path(path));
  std::vector<std::string> validation;  // keywords present that are not annotations
  for (const auto& [key, value] : s.items()) {
    if (contains(kAnnotations, key)) continue;
    if (!contains(kComposition, key) && !is_type_keyword(key)) {
      fail("unsupported keyword '{}' {}", key, at_path(path));
    }
    validation.push_back(key);
  }
  auto only = [&](const char* keyword, std::initializer_list<const char*> allowed) {
    for (const std::string& k : validation) {
      if (k == keyword) continue;
      bool ok = false;
      for (const char* a : allowed) ok = ok || k == a;
      if (!ok) fail("keyword '{}' beside '{}' is not supported {}", k, keyword, at_path(path));
    }
  };
  if (s.contains("$ref")) {
    only("$ref", {});
    if (!s["$ref"].is_string()) fail("$ref {} is not a string", at_path(path));
    return Expr::ref(ref_rule(s["$ref"].get<std::string>(), path));
  }
  if (s.contains("allOf")) {
    only("allOf", {});
    const Json& all = s["allOf"];
    if (!all.is_array() || all.size() != 1) {
      fail("allOf {} must be an array of one schema (allOf of several schemas is not supported)",
           at_path(path));
    }
    return schema_expr(all[0], child_path(child_path(path, "allOf"), "0"), name, depth + 1);
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!s.contains(key)) continue;
    only(key, {});
    const Json& branches = s[key];
    if (!branches.is_array() || branches.empty())
      fail("{} {} must be a non-empty array", key, at_path(path));
    std::vector<Expr> alts;
    for (size_t i = 0; i < branches.size(); ++i) {
      alts.push_back(
          Expr::ref(schema_rule(branches[i], child_path(child_path(path, key), std::to_string(i)),
                                name + "-" + std::to_string(i), depth + 1)));
    }
    return Expr::choice(std::move(alts));
  }
  if (s.contains("enum") || s.contains("const")) {
    only(s.contains("enum") ? "enum" : "const", {"type"});
    return enum_expr(s, path);
  }
  std::vector<Expr> alts;
  for (const std::string& type : types_of(s, path))
    alts.push_back(type_expr(type, s, path, name, depth));
  return Expr::choice(std::move(alts));
}

std::vector<std::string> SchemaCompiler::types_of(const Json& s, const std::string& path) {
  std::vector<std::string> types;
  if (s.contains("type")) {
    const Json& t = s["type"];
    if (t.is_string()) {
      types.push_back(t.get<std::string>());
    } else if (t.is_array() && !t.empty()) {
      for (const Json& x : t) {
        if (!x.is_string()) fail("type {} must be a string or a list of strings", at_path(path));
        types.push_back(x.get<std::string>());
      }
    } else {
      fail("type {} must be a string or a non-empty list of strings", at_path(path));
    }
    for (const std::string& type : types) {
      if (!contains(kTypes, type)) {
        fail("unknown type '{}' {}", type, at_path(path));
      }
    }
    // A type's keywords alongside a type list that lacks it would be ignored silently: refuse.
    for (const TypeKeywords& tk : kTypeKeywords) {
      const bool listed =
          std::find(types.begin(), types.end(), tk.type) != types.end() ||
          (tk.type == "number" && std::find(types.begin(), types.end(), "integer") != types.end());
      for (std::string_view k : tk.keywords) {
        if (!listed && !k.empty() && s.contains(k)) {
          fail("keyword '{}' does not apply to type {} {}", k, t.dump(), at_path(path));
        }
      }
    }
    return types;
  }
  for (const TypeKeywords& tk : kTypeKeywords) {
    for (std::string_view k : tk.keywords) {
      if (!k.empty() && s.contains(k)) {
        types.emplace_back(tk.type);
        break;
      }
    }
  }
  if (types.empty()) types = {"any"};
  return types;
}

Expr SchemaCompiler::type_expr(const std::string& type, const Json& s, const std::string& path,
                               const std::string& name, uint32_t depth) {
  if (type == "any") return Expr::ref(json_.value());
  if (type == "null") return Expr::literal("null");
  if (type == "boolean") return Expr::choice({Expr::literal("true"), Expr::literal("false")});
  if (type == "object") return object_expr(s, path, name, depth);
  if (type == "array") return array_expr(s, path, name, depth);
  if (type == "string") return string_expr(s, path);
  if (type == "integer") return integer_expr(s, path);
  return number_expr(s, path);
}

Expr SchemaCompiler::enum_expr(const Json& s, const std::string& path) {
  std::vector<Json> values;
  if (s.contains("const")) {
    values.push_back(s["const"]);
  } else {
    const Json& e = s["enum"];
    if (!e.is_array() || e.empty()) fail("enum {} must be a non-empty array", at_path(path));
    for (const Json& v : e) values.push_back(v);
  }
  std::vector<std::string> types;
  if (s.contains("type")) types = types_of(s, path);
  std::vector<Expr> alts;
  for (const Json& v : values) {
    bool typed = types.empty();
    for (const std::string& t : types) typed = typed || value_has_type(v, t);
    if (typed) alts.push_back(Expr::literal(v.dump()));
  }
  if (alts.empty()) fail("no enum / const value {} has the schema's type", at_path(path));
  return Expr::choice(std::move(alts));
}

uint32_t json_schema_rules(std::string_view schema_text, GrammarBuilder& builder,
                           const GrammarLimits& limits, const CompileDeadline& deadline) {
  Json schema;
  try {
    schema = Json::parse(schema_text);
  } catch (const nlohmann::json::exception& e) {
    fail("the schema is not valid JSON: {}", e.what());
  }
  return SchemaCompiler(schema, builder, limits, deadline).compile();
}

uint32_t json_object_rules(GrammarBuilder& builder) {
  JsonRules json(builder);
  const uint32_t root = builder.add_rule("root");
  builder.define(root, Expr::ref(json.object()));
  return root;
}

}  // namespace nanovllm::structured
