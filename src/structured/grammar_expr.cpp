#include "structured/grammar_expr.h"

#include "util/check.h"

namespace nanovllm::structured {

Expr Expr::literal(std::string b) {
  Expr e;
  e.kind = Kind::kBytes;
  e.bytes = std::move(b);
  return e;
}

Expr Expr::chars(CodePointSet set) {
  Expr e;
  e.kind = Kind::kCodePoints;
  e.code_points = std::move(set);
  return e;
}

Expr Expr::bytes_of(ByteSet set) {
  Expr e;
  e.kind = Kind::kByteSet;
  e.byte_set = set;
  return e;
}

Expr Expr::ref(uint32_t r) {
  Expr e;
  e.kind = Kind::kRuleRef;
  e.rule = r;
  return e;
}

Expr Expr::seq(std::vector<Expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = Kind::kSequence;
  e.items = std::move(items);
  return e;
}

Expr Expr::choice(std::vector<Expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = Kind::kChoice;
  e.items = std::move(items);
  return e;
}

Expr Expr::repeat(Expr item, uint32_t min, uint32_t max) {
  NV_CHECK(min <= max, "repeat {} > {}", min, max);
  Expr e;
  e.kind = Kind::kRepeat;
  e.min = min;
  e.max = max;
  e.items.push_back(std::move(item));
  return e;
}

int64_t GrammarBuilder::find_rule(const std::string& name) const {
  auto it = index_.find(name);
  return it != index_.end() ? int64_t(it->second) : -1;
}

uint32_t GrammarBuilder::add_rule(const std::string& name) {
  std::string unique = name;
  if (find_rule(unique) >= 0) {
    int& n = next_suffix_[name];
    if (n < 2) n = 2;
    do {
      unique = name + "-" + std::to_string(n++);
    } while (find_rule(unique) >= 0);
  }
  const uint32_t id = uint32_t(names_.size());
  names_.push_back(unique);
  bodies_.emplace_back();
  defined_.push_back(false);
  index_.emplace(unique, id);
  return id;
}

uint32_t GrammarBuilder::rule_named(const std::string& name) {
  const int64_t r = find_rule(name);
  return r >= 0 ? uint32_t(r) : add_rule(name);
}

void GrammarBuilder::define(uint32_t rule, Expr body) {
  NV_CHECK(rule < names_.size() && !defined_[rule], "rule {} defined twice", rule);
  bodies_[rule] = std::move(body);
  defined_[rule] = true;
}

}  // namespace nanovllm::structured
