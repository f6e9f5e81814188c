#pragma once
// A GBNF recognizer written apart from the library, as the oracle of the property test: its own
// reading of the grammar text (the subset the tests' grammars use: one rule per line, literals,
// classes, '.', groups, '|', * + ? {m} {m,} {m,n}) into BNF over code points, and an Earley
// recognizer over the decoded text (predictions of nullable rules also advance the predicting
// item, the fix of Aycock and Horspool). Slow and simple on purpose; throws std::runtime_error on
// grammar text it does not read.
#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace nanovllm::structured::test {

class ReferenceGbnf {
 public:
  explicit ReferenceGbnf(const std::string& text) {
    size_t line_start = 0;
    while (line_start < text.size()) {
      size_t end = text.find('\n', line_start);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(line_start, end - line_start);
      line_start = end + 1;
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      const size_t def = line.find("::=");
      if (def == std::string::npos) throw std::runtime_error("no ::= in " + line);
      std::string name = line.substr(0, def);
      name.erase(name.find_last_not_of(" \t") + 1);
      s_ = line.substr(def + 3);
      pos_ = 0;
      const int lhs = rule(name);
      for (std::vector<Sym>& alt : alternates()) prods_.push_back({lhs, std::move(alt)});
      if (skip(), pos_ != s_.size()) throw std::runtime_error("junk in " + line);
    }
    root_ = rule("root");
    nullable_.assign(names_.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (const Prod& p : prods_) {
        bool all = !nullable_[size_t(p.lhs)];
        for (const Sym& s : p.rhs) all = all && !s.terminal && nullable_[size_t(s.rule)];
        if (all) nullable_[size_t(p.lhs)] = changed = true;
      }
    }
  }

  // Is `input` (code points) a sentence of the grammar?
  bool recognizes(const std::u32string& input) const {
    using Item = std::tuple<int, int, int>;  // production, dot, origin
    std::vector<std::set<Item>> sets(input.size() + 1);
    std::vector<std::vector<Item>> queues(input.size() + 1);
    auto add = [&](size_t k, Item it) {
      if (sets[k].insert(it).second) queues[k].push_back(it);
    };
    for (size_t p = 0; p < prods_.size(); ++p) {
      if (prods_[p].lhs == root_) add(0, {int(p), 0, 0});
    }
    for (size_t k = 0; k <= input.size(); ++k) {
      for (size_t q = 0; q < queues[k].size(); ++q) {
        const auto [p, dot, origin] = queues[k][q];
        const Prod& prod = prods_[size_t(p)];
        if (size_t(dot) == prod.rhs.size()) {  // complete: advance the items waiting for lhs
          const std::vector<Item> waiting(sets[size_t(origin)].begin(), sets[size_t(origin)].end());
          for (const auto& [p2, d2, o2] : waiting) {
            const Prod& w = prods_[size_t(p2)];
            if (size_t(d2) < w.rhs.size() && !w.rhs[size_t(d2)].terminal &&
                w.rhs[size_t(d2)].rule == prod.lhs) {
              add(k, {p2, d2 + 1, o2});
            }
          }
          continue;
        }
        const Sym& next = prod.rhs[size_t(dot)];
        if (next.terminal) {
          if (k < input.size() && next.matches(input[k])) add(k + 1, {p, dot + 1, origin});
          continue;
        }
        for (size_t p2 = 0; p2 < prods_.size(); ++p2) {
          if (prods_[p2].lhs == next.rule) add(k, {int(p2), 0, int(k)});
        }
        if (nullable_[size_t(next.rule)]) add(k, {p, dot + 1, origin});
      }
    }
    for (const auto& [p, dot, origin] : sets[input.size()]) {
      if (origin == 0 && prods_[size_t(p)].lhs == root_ &&
          size_t(dot) == prods_[size_t(p)].rhs.size())
        return true;
    }
    return false;
  }

 private:
  struct Sym {
    bool terminal = false;
    int rule = -1;                                      // a nonterminal
    std::vector<std::pair<char32_t, char32_t>> ranges;  // a terminal: one code point of the ranges
    bool negated = false;
    bool matches(char32_t c) const {
      bool in = false;
      for (const auto& [lo, hi] : ranges) in = in || (c >= lo && c <= hi);
      return in != negated;
    }
  };
  struct Prod {
    int lhs;
    std::vector<Sym> rhs;
  };

  int rule(const std::string& name) {
    auto it = names_.find(name);
    if (it != names_.end()) return it->second;
    const int id = int(names_.size());
    names_[name] = id;
    return id;
  }
  int fresh(std::vector<std::vector<Sym>> alts) {
    const int id = rule(fmt::format("${}", names_.size()));
    for (std::vector<Sym>& a : alts) prods_.push_back({id, std::move(a)});
    return id;
  }
  static Sym nonterminal(int r) {
    Sym s;
    s.rule = r;
    return s;
  }

  void skip() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
  }

  std::vector<std::vector<Sym>> alternates() {
    std::vector<std::vector<Sym>> alts{sequence()};
    while (skip(), pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      alts.push_back(sequence());
    }
    return alts;
  }

  std::vector<Sym> sequence() {
    std::vector<Sym> seq;
    while (skip(), pos_ < s_.size() && s_[pos_] != '|' && s_[pos_] != ')') {
      Sym atom = primary();
      while (skip(), pos_ < s_.size() && std::string("*+?{").find(s_[pos_]) != std::string::npos) {
        atom = postfix(atom);
      }
      seq.push_back(atom);
    }
    return seq;
  }

  Sym postfix(const Sym& x) {
    const char op = s_[pos_++];
    if (op == '*') return star(x);
    if (op == '+') return nonterminal(fresh({{x, star(x)}}));
    if (op == '?') return nonterminal(fresh({{}, {x}}));
    size_t m = 0, n;
    bool unbounded = false;
    while (std::isdigit(uint8_t(s_[pos_]))) m = m * 10 + size_t(s_[pos_++] - '0');
    n = m;
    if (s_[pos_] == ',') {
      ++pos_;
      if (s_[pos_] == '}') {
        unbounded = true;
      } else {
        n = 0;
        while (std::isdigit(uint8_t(s_[pos_]))) n = n * 10 + size_t(s_[pos_++] - '0');
      }
    }
    if (s_[pos_++] != '}') throw std::runtime_error("bad {m,n}");
    std::vector<Sym> body(m, x);
    if (unbounded) {
      body.push_back(star(x));
    } else {
      Sym tail = nonterminal(fresh({{}}));  // the empty string
      for (size_t i = m; i < n; ++i) tail = nonterminal(fresh({{}, {x, tail}}));
      body.push_back(tail);
    }
    return nonterminal(fresh({body}));
  }

  Sym star(const Sym& x) {
    const int id = rule(fmt::format("${}", names_.size()));
    prods_.push_back({id, {}});
    prods_.push_back({id, {x, nonterminal(id)}});
    return nonterminal(id);
  }

  char32_t character() {  // one code point of a literal or class (escapes or UTF-8)
    if (s_[pos_] == '\\') {
      const char e = s_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n':
          return '\n';
        case 't':
          return '\t';
        case 'r':
          return '\r';
        case 'x': {
          const char32_t v = char32_t(std::stoul(s_.substr(pos_, 2), nullptr, 16));
          pos_ += 2;
          return v;
        }
        default:
          return char32_t(uint8_t(e));
      }
    }
    const uint8_t b = uint8_t(s_[pos_]);
    const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int i = 1; i < n; ++i) c = (c << 6) | (uint8_t(s_[pos_ + size_t(i)]) & 0x3F);
    pos_ += size_t(n);
    return c;
  }

  Sym primary() {
    const char c = s_[pos_];
    if (c == '"') {
      ++pos_;
      std::vector<Sym> chars;
      while (s_[pos_] != '"') {
        Sym t;
        t.terminal = true;
        const char32_t cp = character();
        t.ranges = {{cp, cp}};
        chars.push_back(t);
      }
      ++pos_;
      return nonterminal(fresh({chars}));
    }
    if (c == '[') {
      ++pos_;
      Sym t;
      t.terminal = true;
      if (s_[pos_] == '^') {
        t.negated = true;
        ++pos_;
      }
      while (s_[pos_] != ']') {
        const char32_t lo = character();
        char32_t hi = lo;
        if (s_[pos_] == '-' && s_[pos_ + 1] != ']') {
          ++pos_;
          hi = character();
        }
        t.ranges.push_back({lo, hi});
      }
      ++pos_;
      return t;
    }
    if (c == '.') {
      ++pos_;
      Sym t;
      t.terminal = true;
      t.negated = true;  // nothing excluded: any code point
      return t;
    }
    if (c == '(') {
      ++pos_;
      std::vector<std::vector<Sym>> alts = alternates();
      if (s_[pos_++] != ')') throw std::runtime_error("missing )");
      return nonterminal(fresh(std::move(alts)));
    }
    size_t start = pos_;
    while (pos_ < s_.size() &&
           (std::isalnum(uint8_t(s_[pos_])) || s_[pos_] == '-' || s_[pos_] == '_'))
      ++pos_;
    if (pos_ == start) throw std::runtime_error("unexpected '" + std::string(1, c) + "'");
    return nonterminal(rule(s_.substr(start, pos_ - start)));
  }

  std::string s_;
  size_t pos_ = 0;
  std::map<std::string, int> names_;
  std::vector<Prod> prods_;
  std::vector<bool> nullable_;
  int root_ = 0;
};

}  // namespace nanovllm::structured::test
