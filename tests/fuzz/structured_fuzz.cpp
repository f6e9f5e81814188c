// libFuzzer target for the structured-output front ends (src/structured): JSON Schema, regex,
// GBNF, choice lists (and json_object) compiled to the byte-level grammar under small
// GrammarLimits, then a GrammarMatcher walk over a small fixed vocabulary.
//
// Input: byte 0 picks the front end (bits 0-2: 0 json_schema, 1 regex, 2 gbnf, 3 choice,
// 4 json_object, 5-7 json_schema / regex / gbnf again) and max_stack_depth (bits 3-4: 4, 12, 64,
// 200; the digits '0'..'4' pick 64). The rest, up to the first NUL byte, is the grammar text
// (choices: one per line); the bytes after the NUL, if any, steer the walk (else a generator
// seeded by the input does).
//
// Compiling must succeed or throw nanovllm::Error whose message starts with the kind; the walk
// may throw only the Error naming max_parse_stacks. Anything else (another exception, a crash,
// UB, a leak, a hang) is a bug. Each walk step checks: the count fill_next_token_bitmask returns
// is the number of bits set; every token's bit agrees with can_accept_bytes (EOS: with
// can_end()); padding / empty tokens are never allowed; a live matcher allows some token, and
// some non-EOS token exactly when it is not terminated; the picked token is accepted, and a
// token outside the mask is refused without changing the state; accepting EOS terminates.
// Also: a copied matcher (a forked sequence) and a reset() one give the same masks, and a new
// matcher replaying the walk (hitting the grammar's mask cache from another arena) passes the
// same checks.
// STRUCTURED_FUZZ_VERBOSE=1 in the environment prints each input's outcome (the compile Error,
// or the bytes the walk accepted) to stderr.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "structured/compiled_grammar.h"
#include "structured/grammar_limits.h"
#include "structured/grammar_matcher.h"
#include "structured/token_vocabulary.h"
#include "util/check.h"

namespace {

using nanovllm::structured::CompiledGrammar;
using nanovllm::structured::GrammarLimits;
using nanovllm::structured::GrammarMatcher;
using nanovllm::structured::GrammarSpec;
using nanovllm::structured::TokenVocabulary;

bool verbose() {
  static const bool v = std::getenv("STRUCTURED_FUZZ_VERBOSE") != nullptr;
  return v;
}

[[noreturn]] void bug(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "structured_fuzz: %s%s%s\n", what, detail.empty() ? "" : ": ",
               detail.c_str());
  std::abort();
}

// Tokens 0..255: the single bytes; then multi-byte tokens (JSON pieces, whole and split UTF-8),
// an empty token (never allowed), two EOS ids and two padding ids.
constexpr int32_t kNumBytes = 256;
const std::vector<std::string>& extra_tokens() {
  // clang-format off
  static const std::vector<std::string> kExtra = {
      "{\"", "\":", "\": ", "\",\"", "\"}", "true", "false", "null", "}", "},", "]", "],",
      "[{", "\n  ", "\n", "  ", ", ", "0", "12", "-1", "1.5", "e+", "ab", "abc", "aaaa",
      "\xe4\xb8\xad", "\xe4\xb8", "\xb8\xad", "\xc3\xa9", "\xf0\x9f\x98\x80", "\\n", "\\\"",
      "\\u00", "\"", "root", "::=", "x", "xyz", "-", "T", "00:", "@", ".com", ""};
  // clang-format on
  return kExtra;
}

struct Vocab {
  std::shared_ptr<const TokenVocabulary> vocab;
  std::vector<std::string> bytes;  // [vocab_size], empty for EOS, padding and the empty token
  std::vector<int32_t> eos;
};

const Vocab& vocab() {
  static const Vocab v = [] {
    Vocab r;
    for (int b = 0; b < kNumBytes; ++b) r.bytes.push_back(std::string(1, char(b)));
    for (const std::string& t : extra_tokens()) r.bytes.push_back(t);
    const int32_t n = int32_t(r.bytes.size());
    r.eos = {n, n + 1};
    const int32_t vocab_size = n + 4;  // two EOS, two padding
    r.vocab = std::make_shared<const TokenVocabulary>(r.bytes, vocab_size, r.eos);
    r.bytes.resize(size_t(vocab_size));
    return r;
  }();
  return v;
}

bool bit(const std::vector<uint32_t>& mask, int32_t t) {
  return (mask[size_t(t) / 32] >> (t % 32)) & 1;
}

// The walk's choices: the bytes after the NUL, then a generator seeded by the whole input.
class Choices {
 public:
  Choices(std::string_view steer, uint64_t seed) : steer_(steer), state_(seed | 1) {}
  uint32_t next() {
    if (pos_ < steer_.size()) return uint8_t(steer_[pos_++]);
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return uint32_t(state_ >> 32);
  }

 private:
  std::string_view steer_;
  size_t pos_ = 0;
  uint64_t state_;
};

// One mask, checked against the definition. Returns the number of allowed tokens.
int checked_mask(GrammarMatcher& m, std::vector<uint32_t>& mask) {
  const Vocab& v = vocab();
  const int32_t vocab_size = v.vocab->vocab_size();
  std::memset(mask.data(), 0xAB, mask.size() * sizeof(uint32_t));  // must be overwritten
  const int n = m.fill_next_token_bitmask(mask.data());
  int set = 0, non_eos = 0;
  for (size_t w = 0; w < mask.size(); ++w) set += __builtin_popcount(mask[w]);
  if (set != n)
    bug("the mask's count differs from its bits", std::to_string(n) + " vs " + std::to_string(set));
  for (int32_t t = vocab_size; t < int32_t(mask.size() * 32); ++t)
    if (bit(mask, t)) bug("a bit past the vocabulary is set");
  const bool can_end = m.can_end();
  for (int32_t t = 0; t < vocab_size; ++t) {
    const bool allowed = bit(mask, t);
    if (v.vocab->is_eos(t)) {
      if (allowed != can_end) bug("an EOS bit differs from can_end()");
      continue;
    }
    const std::string& b = v.bytes[size_t(t)];
    if (b.empty()) {
      if (allowed) bug("an empty or padding token is allowed", std::to_string(t));
      continue;
    }
    if (allowed != m.can_accept_bytes(b))
      bug("a mask bit differs from can_accept_bytes", std::to_string(t));
    non_eos += allowed;
  }
  if (m.is_terminated() != (non_eos == 0)) bug("is_terminated() disagrees with the mask");
  if (n == 0) bug("a live matcher allows no token");
  return n;
}

void walk(const std::shared_ptr<const CompiledGrammar>& g, Choices& choices) {
  const Vocab& v = vocab();
  const int32_t vocab_size = v.vocab->vocab_size();
  GrammarMatcher m(g, v.vocab);
  std::vector<uint32_t> mask(size_t(v.vocab->num_bitmask_words()));
  std::vector<uint32_t> first, other(mask.size());
  constexpr int kSteps = 40;
  std::string walked;           // for verbose()
  std::vector<int32_t> tokens;  // the accepted ones
  for (int step = 0; step < kSteps; ++step) {
    const int n = checked_mask(m, mask);
    if (step == 0) first = mask;
    const uint32_t c = choices.next();
    if (c % 8 == 7) {
      // A token outside the mask (if any) is refused, and the state stays as it was.
      int32_t t = int32_t(choices.next() % uint32_t(vocab_size + 2)) - 1;  // -1 .. vocab_size
      for (int k = 0; k < vocab_size + 2 && t >= 0 && t < vocab_size && bit(mask, t); ++k)
        t = (t + 1) % vocab_size;
      if (t < 0 || t >= vocab_size || !bit(mask, t)) {
        if (m.accept_token(t)) bug("a token outside the mask was accepted", std::to_string(t));
        m.fill_next_token_bitmask(other.data());
        if (other != mask) bug("a refused token changed the mask");
      }
    } else if (c % 8 == 6) {
      // A fork: the copy's mask equals the original's, and so does its next step.
      GrammarMatcher copy = m;
      if (copy.fill_next_token_bitmask(other.data()) != n || other != mask)
        bug("a copied matcher's mask differs");
    }
    // Pick the k-th allowed token.
    uint32_t k = choices.next() % uint32_t(n);
    int32_t pick = -1;
    for (int32_t t = 0; t < vocab_size && pick < 0; ++t)
      if (bit(mask, t) && k-- == 0) pick = t;
    if (pick < 0) bug("the picked token is not in the mask");
    if (!m.accept_token(pick)) bug("an allowed token was refused", std::to_string(pick));
    tokens.push_back(pick);
    walked += v.vocab->is_eos(pick) ? std::string("<EOS>") : v.bytes[size_t(pick)];
    if (v.vocab->is_eos(pick)) {
      if (!m.is_terminated() || m.can_end()) bug("accepting EOS did not terminate");
      if (m.fill_next_token_bitmask(mask.data()) != 0) bug("a mask after EOS is not empty");
      for (uint32_t w : mask)
        if (w) bug("a mask after EOS has bits");
      if (m.accept_token(0) || m.accept_token(v.eos[0]) || m.accept_bytes("a"))
        bug("something was accepted after EOS");
      break;
    }
  }
  if (verbose()) std::fprintf(stderr, "structured_fuzz: walked: %s\n", walked.c_str());
  // Raw bytes: accept_bytes agrees with can_accept_bytes.
  if (!m.is_terminated()) {
    std::string raw;
    for (uint32_t len = choices.next() % 4 + 1; len > 0; --len) raw += char(choices.next());
    const bool can = m.can_accept_bytes(raw);
    if (m.accept_bytes(raw) != can) bug("accept_bytes disagrees with can_accept_bytes");
  }
  // Back to the start: the first mask again.
  m.reset();
  checked_mask(m, mask);
  if (mask != first) bug("the mask after reset() differs from the first one");
  // A new matcher (its own arena, the grammar's mask cache now warm) replays the walk: cached
  // masks must hold for equal states of another arena.
  GrammarMatcher replay(g, v.vocab);
  for (int32_t t : tokens) {
    checked_mask(replay, mask);
    if (!bit(mask, t) || !replay.accept_token(t))
      bug("the replay refused a token", std::to_string(t));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static constexpr GrammarSpec::Kind kKinds[8] = {
      GrammarSpec::Kind::kJsonSchema, GrammarSpec::Kind::kRegex,
      GrammarSpec::Kind::kGbnf,       GrammarSpec::Kind::kChoice,
      GrammarSpec::Kind::kJsonObject, GrammarSpec::Kind::kJsonSchema,
      GrammarSpec::Kind::kRegex,      GrammarSpec::Kind::kGbnf};
  static constexpr uint32_t kDepths[4] = {4, 12, 64, 200};
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = rest.find('\0');
  const std::string_view text = rest.substr(0, nul);
  const std::string_view steer =
      nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  uint64_t seed = 1469598103934665603ull;  // FNV-1a of the input
  for (size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 1099511628211ull;

  GrammarSpec spec;
  spec.kind = kKinds[data[0] & 7];
  if (spec.kind == GrammarSpec::Kind::kChoice) {
    size_t start = 0;
    while (true) {
      const size_t end = text.find('\n', start);
      spec.choices.emplace_back(
          text.substr(start, end == std::string_view::npos ? end : end - start));
      if (end == std::string_view::npos) break;
      start = end + 1;
    }
  } else if (spec.kind != GrammarSpec::Kind::kJsonObject) {
    spec.text = std::string(text);
  }

  // Small limits, so that one input stays fast.
  GrammarLimits limits;
  limits.max_text_bytes = 4096;
  limits.max_rules = 2000;
  limits.max_elements = 20000;
  limits.max_nesting_depth = 24;
  limits.max_repetition = 64;
  limits.max_compile_seconds = 2;
  limits.max_stack_depth = kDepths[(data[0] >> 3) & 3];
  limits.max_parse_stacks = 256;
  limits.mask_cache_bytes = 64 << 10;

  const std::string kind = nanovllm::structured::kind_name(spec.kind);
  std::shared_ptr<const CompiledGrammar> g;
  try {
    g = nanovllm::structured::compile_grammar(spec, limits);
  } catch (const nanovllm::Error& e) {
    if (std::string_view(e.what()).substr(0, kind.size() + 2) != kind + ": ")
      bug("a compile Error does not start with the kind", e.what());
    if (verbose()) std::fprintf(stderr, "structured_fuzz: Error: %s\n", e.what());
    return 0;
  } catch (const std::exception& e) {
    bug("compile_grammar threw something other than Error", e.what());
  }
  Choices choices(steer, seed);
  try {
    walk(g, choices);
  } catch (const nanovllm::Error& e) {
    if (std::string_view(e.what()).find("max_parse_stacks") == std::string_view::npos)
      bug("the matcher threw an Error other than max_parse_stacks", e.what());
    if (verbose()) std::fprintf(stderr, "structured_fuzz: walk Error: %s\n", e.what());
  } catch (const std::exception& e) {
    bug("the matcher threw something other than Error", e.what());
  }
  return 0;
}
