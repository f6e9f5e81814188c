#include "structured/grammar_analysis.h"

#include <algorithm>
#include <functional>
#include <queue>

#include "util/check.h"

namespace nanovllm::structured {

namespace {

using Alternative = std::vector<Element>;
using RuleAlternatives = std::vector<std::vector<Alternative>>;

// Least fixpoint of "rule r has an alternative whose elements all satisfy P", where a byte-set
// element satisfies P iff `byte_ok(set)` and a reference iff its rule is marked. Linear time: each
// alternative counts its pending references, each newly marked rule decrements its users.
template <typename ByteOk>
std::vector<bool> fixpoint(const Grammar& g, const RuleAlternatives& alts, ByteOk byte_ok) {
  const size_t num_rules = alts.size();
  struct AltRef {
    uint32_t rule, alt;
  };
  std::vector<std::vector<AltRef>> users(num_rules);  // rule -> alternatives referencing it
  std::vector<std::vector<uint32_t>> pending(num_rules);
  std::vector<bool> marked(num_rules, false);
  std::vector<uint32_t> queue;
  for (uint32_t r = 0; r < num_rules; ++r) {
    pending[r].resize(alts[r].size(), 0);
    for (uint32_t a = 0; a < alts[r].size(); ++a) {
      bool possible = true;
      for (Element e : alts[r][a]) {
        if (e.kind == ElementKind::kByteSet) {
          possible = possible && byte_ok(g.byte_sets[e.value]);
        } else {
          ++pending[r][a];
          users[e.value].push_back({r, a});
        }
      }
      if (!possible) pending[r][a] = UINT32_MAX;  // never satisfied
      if (pending[r][a] == 0 && !marked[r]) {
        marked[r] = true;
        queue.push_back(r);
      }
    }
  }
  while (!queue.empty()) {
    const uint32_t r = queue.back();
    queue.pop_back();
    for (AltRef u : users[r]) {
      uint32_t& p = pending[u.rule][u.alt];
      if (p != UINT32_MAX && --p == 0 && !marked[u.rule]) {
        marked[u.rule] = true;
        queue.push_back(u.rule);
      }
    }
  }
  return marked;
}

// Strongly connected components (iterative Tarjan): comp[v] for each vertex.
std::vector<uint32_t> components(const std::vector<std::vector<uint32_t>>& edges) {
  const uint32_t n = uint32_t(edges.size());
  constexpr uint32_t kNone = UINT32_MAX;
  std::vector<uint32_t> index(n, kNone), low(n, 0), comp(n, kNone), stack;
  std::vector<bool> on_stack(n, false);
  struct Frame {
    uint32_t v, next_edge;
  };
  std::vector<Frame> call;
  uint32_t counter = 0, num_comps = 0;
  for (uint32_t s = 0; s < n; ++s) {
    if (index[s] != kNone) continue;
    call.push_back({s, 0});
    index[s] = low[s] = counter++;
    stack.push_back(s);
    on_stack[s] = true;
    while (!call.empty()) {
      Frame& f = call.back();
      if (f.next_edge < edges[f.v].size()) {
        const uint32_t w = edges[f.v][f.next_edge++];
        if (index[w] == kNone) {
          index[w] = low[w] = counter++;
          stack.push_back(w);
          on_stack[w] = true;
          call.push_back({w, 0});
        } else if (on_stack[w]) {
          low[f.v] = std::min(low[f.v], index[w]);
        }
        continue;
      }
      const uint32_t v = f.v;
      call.pop_back();
      if (!call.empty()) low[call.back().v] = std::min(low[call.back().v], low[v]);
      if (low[v] == index[v]) {
        uint32_t w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = false;
          comp[w] = num_comps;
        } while (w != v);
        ++num_comps;
      }
    }
  }
  return comp;
}

// Left recursion that grows the stack: a cycle of left corners (references reached before any
// byte, through nullable rules) containing a reference that is not the last element of its
// alternative (it pushes a return frame). A cycle of tail references only loops in place, and
// the matcher's expansion stops at repeated (position, parent) pairs.
void check_left_recursion(const Grammar& g, const RuleAlternatives& alts,
                          const std::vector<bool>& nullable) {
  const size_t n = alts.size();
  std::vector<std::vector<uint32_t>> edges(n);
  for (uint32_t r = 0; r < n; ++r) {
    for (const Alternative& a : alts[r]) {
      for (Element e : a) {
        if (e.kind != ElementKind::kRuleRef) break;
        edges[r].push_back(e.value);
        if (!nullable[e.value]) break;
      }
    }
  }
  const std::vector<uint32_t> comp = components(edges);
  for (uint32_t r = 0; r < n; ++r) {
    for (const Alternative& a : alts[r]) {
      for (size_t i = 0; i < a.size(); ++i) {
        const Element e = a[i];
        if (e.kind != ElementKind::kRuleRef) break;
        const bool pushes = i + 1 < a.size();
        if (pushes && comp[e.value] == comp[r])
          fail("left recursion in rule '{}'", g.rules[r].name);
        if (!nullable[e.value]) break;
      }
    }
  }
}

// need[r]: the fewest frames that deriving some string of rule r stacks above its caller's
// parent. An alternative needs the most of its elements: a byte 1, a reference to s 1 + need[s]
// (its return frame, then s), a tail reference need[s] (no return frame); a rule the least of
// its alternatives. Computed as Knuth's generalization of Dijkstra's algorithm (each
// alternative's cost is a superior function of its references' needs).
std::vector<uint32_t> stack_needs(const RuleAlternatives& alts) {
  const size_t n = alts.size();
  struct Use {
    uint32_t rule, alt, extra;  // extra: 1 for a reference that pushes a return frame
  };
  std::vector<std::vector<Use>> users(n);
  std::vector<std::vector<uint32_t>> pending(n), cost(n);
  using Candidate = std::pair<uint32_t, uint32_t>;  // (need, rule), smallest first
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  for (uint32_t r = 0; r < n; ++r) {
    pending[r].assign(alts[r].size(), 0);
    cost[r].assign(alts[r].size(), 0);
    for (uint32_t a = 0; a < alts[r].size(); ++a) {
      const Alternative& alt = alts[r][a];
      for (size_t i = 0; i < alt.size(); ++i) {
        if (alt[i].kind == ElementKind::kByteSet) {
          cost[r][a] = std::max(cost[r][a], 1u);
        } else {
          ++pending[r][a];
          users[alt[i].value].push_back({r, a, i + 1 < alt.size() ? 1u : 0u});
        }
      }
      if (pending[r][a] == 0) queue.emplace(cost[r][a], r);
    }
  }
  std::vector<uint32_t> need(n, UINT32_MAX);
  while (!queue.empty()) {
    const auto [v, r] = queue.top();
    queue.pop();
    if (need[r] != UINT32_MAX) continue;
    need[r] = v;
    for (const Use& u : users[r]) {
      cost[u.rule][u.alt] = std::max(cost[u.rule][u.alt], v + u.extra);
      if (--pending[u.rule][u.alt] == 0) queue.emplace(cost[u.rule][u.alt], u.rule);
    }
  }
  return need;
}

// rest_need of every position: from the alternative's end backwards, the most that its
// remaining elements need above the frame (a byte 0, a pushing reference need[s], a tail
// reference need[s] - 1).
void layout_rest_needs(Grammar& g, const std::vector<uint32_t>& need) {
  g.rest_need.assign(g.elements.size(), 0);
  for (size_t p = g.elements.size(); p-- > 0;) {
    const Element e = g.elements[p];
    if (e.kind == ElementKind::kEnd) continue;
    uint32_t own = 0;
    if (e.kind == ElementKind::kRuleRef) {
      const uint32_t s = need[e.value];
      own = g.elements[p + 1].kind == ElementKind::kEnd ? (s > 0 ? s - 1 : 0) : s;
    }
    g.rest_need[p] = std::max(own, g.rest_need[p + 1]);
  }
}

}  // namespace

void finish_grammar(Grammar& g, RuleAlternatives& alts, const CompileDeadline& deadline) {
  const std::vector<bool> productive =
      fixpoint(g, alts, [](const ByteSet& s) { return !s.empty(); });
  if (!productive[g.root])
    fail("the grammar matches no string (rule '{}' derives nothing)", g.rules[g.root].name);
  for (uint32_t r = 0; r < alts.size(); ++r) {
    auto& rule_alts = alts[r];
    rule_alts.erase(std::remove_if(rule_alts.begin(), rule_alts.end(),
                                   [&](const Alternative& a) {
                                     for (Element e : a) {
                                       if (e.kind == ElementKind::kByteSet
                                               ? g.byte_sets[e.value].empty()
                                               : !productive[e.value]) {
                                         return true;
                                       }
                                     }
                                     return false;
                                   }),
                    rule_alts.end());
  }
  deadline.check();
  const std::vector<bool> nullable = fixpoint(g, alts, [](const ByteSet&) { return false; });
  check_left_recursion(g, alts, nullable);
  deadline.check();
  g.elements = {{ElementKind::kRuleRef, g.root}, {ElementKind::kEnd, 0}};
  for (uint32_t r = 0; r < alts.size(); ++r) {
    g.rules[r].alternatives.clear();
    for (const Alternative& a : alts[r]) {
      g.rules[r].alternatives.push_back(uint32_t(g.elements.size()));
      g.elements.insert(g.elements.end(), a.begin(), a.end());
      g.elements.push_back({ElementKind::kEnd, 0});
    }
  }
  deadline.check();
  layout_rest_needs(g, stack_needs(alts));
}

}  // namespace nanovllm::structured
