#include "structured/lower_grammar.h"

#include <algorithm>
#include <unordered_map>

#include "structured/grammar_analysis.h"
#include "util/check.h"

namespace nanovllm::structured {

namespace {

using Alternative = std::vector<Element>;

uint64_t element_key(Element e) { return (uint64_t(e.kind) << 32) | e.value; }

class Lowering {
 public:
  Lowering(const GrammarBuilder& b, const GrammarLimits& limits, const CompileDeadline& deadline)
      : b_(b), limits_(limits), deadline_(deadline) {
    for (uint32_t r = 0; r < b.num_rules(); ++r) add_rule(b.name(r));
  }

  Grammar run(uint32_t root) {
    for (uint32_t r = 0; r < b_.num_rules(); ++r) {
      if (!b_.is_defined(r)) fail("rule '{}' is not defined", b_.name(r));
      deadline_.check();
      alts_[r] = lower_alternatives(b_.body(r), r);
      count_elements(alts_[r]);
    }
    Grammar g;
    g.root = root;
    g.byte_sets = std::move(byte_sets_);
    g.rules.resize(names_.size());
    for (size_t r = 0; r < names_.size(); ++r) g.rules[r].name = std::move(names_[r]);
    finish_grammar(g, alts_, deadline_);
    return g;
  }

 private:
  uint32_t add_rule(std::string name) {
    if (names_.size() >= limits_.max_rules) {
      fail("grammar limit max_rules ({}) exceeded (at rule '{}')", limits_.max_rules, name);
    }
    names_.push_back(std::move(name));
    alts_.emplace_back();
    return uint32_t(names_.size() - 1);
  }

  void count_elements(const std::vector<Alternative>& alts) {
    for (const Alternative& a : alts) num_elements_ += a.size() + 1;
    if (num_elements_ > limits_.max_elements) {
      fail("grammar limit max_elements ({}) exceeded", limits_.max_elements);
    }
  }

  uint32_t byte_set_index(const ByteSet& s) {
    auto [it, inserted] = byte_set_index_.emplace(s, uint32_t(byte_sets_.size()));
    if (inserted) byte_sets_.push_back(s);
    return it->second;
  }

  Element byte_element(const ByteSet& s) { return {ElementKind::kByteSet, byte_set_index(s)}; }

  // A helper rule with these alternatives; equal bodies share one rule.
  uint32_t helper(uint32_t owner, const char* suffix, std::vector<Alternative> alts) {
    std::string key;
    for (const Alternative& a : alts) {
      for (Element e : a) {
        const uint64_t k = element_key(e);
        key.append(reinterpret_cast<const char*>(&k), sizeof(k));
      }
      key += '|';
    }
    auto it = helper_memo_.find(key);
    if (it != helper_memo_.end()) return it->second;
    const uint32_t r = add_rule(names_[owner] + suffix);
    count_elements(alts);
    alts_[r] = std::move(alts);
    helper_memo_.emplace(std::move(key), r);
    if ((r & 255) == 0) deadline_.check();
    return r;
  }

  std::vector<Alternative> lower_alternatives(const Expr& e, uint32_t owner) {
    std::vector<Alternative> alts;
    if (e.kind == Expr::Kind::kChoice) {
      for (const Expr& item : e.items) {
        std::vector<Alternative> sub = lower_alternatives(item, owner);
        for (Alternative& a : sub) alts.push_back(std::move(a));
      }
    } else {
      alts.emplace_back();
      lower_sequence(e, owner, alts.back());
    }
    return alts;
  }

  void lower_sequence(const Expr& e, uint32_t owner, Alternative& out) {
    switch (e.kind) {
      case Expr::Kind::kSequence:
        for (const Expr& item : e.items) lower_sequence(item, owner, out);
        return;
      case Expr::Kind::kBytes:
        for (char c : e.bytes) out.push_back(byte_element(ByteSet::single(uint8_t(c))));
        return;
      case Expr::Kind::kByteSet:
        out.push_back(byte_element(e.byte_set));
        return;
      case Expr::Kind::kRuleRef:
        NV_CHECK(e.rule < b_.num_rules(), "bad rule reference {}", e.rule);
        out.push_back({ElementKind::kRuleRef, e.rule});
        return;
      case Expr::Kind::kCodePoints:
        out.push_back(code_points_element(e.code_points, owner));
        return;
      case Expr::Kind::kChoice:
        if (e.items.size() == 1) {
          lower_sequence(e.items[0], owner, out);
        } else {
          out.push_back({ElementKind::kRuleRef, helper(owner, "", lower_alternatives(e, owner))});
        }
        return;
      case Expr::Kind::kRepeat:
        lower_repeat(e, owner, out);
        return;
    }
  }

  Element code_points_element(const CodePointSet& set, uint32_t owner) {
    if (set.ascii_only()) {
      ByteSet s;
      for (const CodePointRange& r : set.ranges()) {
        for (uint32_t c = r.lo; c <= r.hi; ++c) s.insert(uint8_t(c));
      }
      return byte_element(s);  // empty for an empty set: an unproductive element
    }
    std::vector<Alternative> alts;
    for (const std::vector<ByteRange>& seq : utf8_sequences(set)) {
      Alternative a;
      for (ByteRange br : seq) a.push_back(byte_element(ByteSet::range(br.lo, br.hi)));
      alts.push_back(std::move(a));
    }
    return {ElementKind::kRuleRef, helper(owner, "-char", std::move(alts))};
  }

  // `e` as one element: itself when it lowers to exactly one, else a helper rule.
  Element single_element(const Expr& e, uint32_t owner) {
    std::vector<Alternative> alts = lower_alternatives(e, owner);
    if (alts.size() == 1 && alts[0].size() == 1) return alts[0][0];
    return {ElementKind::kRuleRef, helper(owner, "", std::move(alts))};
  }

  void lower_repeat(const Expr& e, uint32_t owner, Alternative& out) {
    const bool bounded = e.max != Expr::kUnbounded;
    if (e.min > limits_.max_repetition || (bounded && e.max > limits_.max_repetition)) {
      fail("grammar limit max_repetition ({}) exceeded by a repetition {{{},{}}} in rule '{}'",
           limits_.max_repetition, e.min, bounded ? std::to_string(e.max) : std::string(),
           names_[owner]);
    }
    if (e.max == 0) return;
    const Element x = single_element(e.items[0], owner);
    for (uint32_t i = 0; i < e.min; ++i) out.push_back(x);
    if (!bounded) {
      out.push_back({ElementKind::kRuleRef, star_rule(x, owner)});
    } else if (e.max > e.min) {
      out.push_back({ElementKind::kRuleRef, optional_chain(x, e.max - e.min, owner)});
    }
    if (out.size() > limits_.max_elements) {
      fail("grammar limit max_elements ({}) exceeded", limits_.max_elements);
    }
  }

  // star ::= x star | (empty)
  uint32_t star_rule(Element x, uint32_t owner) {
    auto it = star_memo_.find(element_key(x));
    if (it != star_memo_.end()) return it->second;
    const uint32_t r = add_rule(names_[owner] + "-star");
    alts_[r] = {{x, {ElementKind::kRuleRef, r}}, {}};
    count_elements(alts_[r]);
    star_memo_.emplace(element_key(x), r);
    return r;
  }

  // opt_k ::= x opt_k-1 | (empty), opt_1 ::= x | (empty): at most k copies of x.
  uint32_t optional_chain(Element x, uint32_t k, uint32_t owner) {
    std::vector<uint32_t>& chain = opt_memo_[element_key(x)];
    while (chain.size() < k) {
      const uint32_t r = add_rule(names_[owner] + "-opt");
      if (chain.empty()) {
        alts_[r] = {{x}, {}};
      } else {
        alts_[r] = {{x, {ElementKind::kRuleRef, chain.back()}}, {}};
      }
      count_elements(alts_[r]);
      chain.push_back(r);
      if ((chain.size() & 255) == 0) deadline_.check();
    }
    return chain[k - 1];
  }

  const GrammarBuilder& b_;
  const GrammarLimits& limits_;
  const CompileDeadline& deadline_;
  std::vector<std::string> names_;
  std::vector<std::vector<Alternative>> alts_;
  std::vector<ByteSet> byte_sets_;
  std::unordered_map<ByteSet, uint32_t, ByteSetHash> byte_set_index_;
  std::unordered_map<std::string, uint32_t> helper_memo_;
  std::unordered_map<uint64_t, uint32_t> star_memo_;
  std::unordered_map<uint64_t, std::vector<uint32_t>> opt_memo_;
  size_t num_elements_ = 0;
};

}  // namespace

Grammar lower_grammar(const GrammarBuilder& builder, uint32_t root, const GrammarLimits& limits,
                      const CompileDeadline& deadline) {
  NV_CHECK(root < builder.num_rules(), "bad root {}", root);
  return Lowering(builder, limits, deadline).run(root);
}

}  // namespace nanovllm::structured
