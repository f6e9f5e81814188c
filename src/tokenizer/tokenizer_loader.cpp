// tokenizer.json -> TokenizerImpl. Every rejection names the file and the JSON field.
#include <limits>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"
#include "util/check.h"
#include "util/file.h"

namespace nanovllm {

namespace {

using nlohmann::json;

// Ids beyond this are rejected: tables are indexed by id.
constexpr int64_t kMaxId = (1 << 24) - 1;

class Loader {
 public:
  explicit Loader(std::string source) : source_(std::move(source)) {}

  std::unique_ptr<TokenizerImpl> load(const json& root);

 private:
  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    fail("{}: {}: {}", source_, field, what);
  }
  const json& member(const json& obj, const std::string& field, const char* key) const {
    const auto it = obj.find(key);
    if (it == obj.end()) bad(field + "." + key, "missing");
    return *it;
  }
  const json* optional_member(const json& obj, const char* key) const {
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  std::string string_of(const json& v, const std::string& field) const {
    if (!v.is_string()) bad(field, fmt::format("expected a string, got {}", v.type_name()));
    return v.get<std::string>();
  }
  bool bool_of(const json& obj, const std::string& field, const char* key, bool fallback) const {
    const json* v = optional_member(obj, key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) bad(field + "." + key, fmt::format("expected a boolean, got {}", v->type_name()));
    return v->get<bool>();
  }
  int32_t id_of(const json& v, const std::string& field) const {
    if (!v.is_number_integer()) bad(field, fmt::format("expected an integer id, got {}", v.type_name()));
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id > kMaxId) bad(field, fmt::format("id {} out of range [0, {}]", id, kMaxId));
    return static_cast<int32_t>(id);
  }
  std::string type_of(const json& obj, const std::string& field) const {
    if (!obj.is_object()) bad(field, fmt::format("expected an object, got {}", obj.type_name()));
    return string_of(member(obj, field, "type"), field + ".type");
  }

  void load_model(const json& model, TokenizerImpl& t);
  void load_normalizer(const json& n, const std::string& field, TokenizerImpl& t);
  void load_pre_tokenizer(const json& p, const std::string& field, TokenizerImpl& t);
  void load_decoder(const json& d, const std::string& field);
  void load_added_tokens(const json& list, TokenizerImpl& t);
  void build_tables(TokenizerImpl& t);

  std::string source_;
  bool saw_byte_level_ = false;
};

std::unique_ptr<TokenizerImpl> Loader::load(const json& root) {
  if (!root.is_object()) bad("(top level)", fmt::format("expected an object, got {}", root.type_name()));
  auto t = std::make_unique<TokenizerImpl>();
  t->source = source_;
  load_model(member(root, "", "model"), *t);
  if (const json* n = optional_member(root, "normalizer")) load_normalizer(*n, "normalizer", *t);
  const json* p = optional_member(root, "pre_tokenizer");
  if (p == nullptr) bad("pre_tokenizer", "missing or null; only byte-level BPE is supported");
  load_pre_tokenizer(*p, "pre_tokenizer", *t);
  if (!saw_byte_level_) bad("pre_tokenizer", "has no ByteLevel step; only byte-level BPE is supported");
  const json* d = optional_member(root, "decoder");
  if (d == nullptr) bad("decoder", "missing or null; expected ByteLevel");
  load_decoder(*d, "decoder");
  if (const json* a = optional_member(root, "added_tokens")) {
    load_added_tokens(*a, *t);
  } else {
    t->raw_matcher = std::make_unique<AddedTokenMatcher>(std::vector<AddedToken>{}, std::vector<std::string>{});
    t->normalized_matcher = std::make_unique<AddedTokenMatcher>(std::vector<AddedToken>{}, std::vector<std::string>{});
  }
  build_tables(*t);
  return t;
}

void Loader::load_model(const json& model, TokenizerImpl& t) {
  if (!model.is_object()) bad("model", fmt::format("expected an object, got {}", model.type_name()));
  if (const json* type = optional_member(model, "type")) {
    const std::string name = string_of(*type, "model.type");
    if (name != "BPE") bad("model.type", fmt::format("unsupported model type \"{}\" (only BPE)", name));
  }
  BpeConfig config;
  const json& vocab = member(model, "model", "vocab");
  if (!vocab.is_object()) bad("model.vocab", fmt::format("expected an object, got {}", vocab.type_name()));
  config.vocab.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    config.vocab.emplace(token, id_of(id, fmt::format("model.vocab[\"{}\"]", token)));
  }
  const json& merges = member(model, "model", "merges");
  if (!merges.is_array()) bad("model.merges", fmt::format("expected an array, got {}", merges.type_name()));
  config.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string field = fmt::format("model.merges[{}]", i);
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        bad(field, fmt::format("\"{}\" is not two tokens separated by one space", s));
      }
      config.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2) {
      config.merges.emplace_back(string_of(m[0], field + "[0]"), string_of(m[1], field + "[1]"));
    } else {
      bad(field, "expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  if (const json* unk = optional_member(model, "unk_token")) config.unk_token = string_of(*unk, "model.unk_token");
  config.fuse_unk = bool_of(model, "model", "fuse_unk", false);
  config.byte_fallback = bool_of(model, "model", "byte_fallback", false);
  config.ignore_merges = bool_of(model, "model", "ignore_merges", false);
  if (const json* dropout = optional_member(model, "dropout")) {
    if (!dropout->is_number()) bad("model.dropout", "expected a number or null");
    if (dropout->get<double>() != 0.0) bad("model.dropout", "BPE dropout is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* v = optional_member(model, key)) {
      if (!string_of(*v, std::string("model.") + key).empty()) {
        bad(std::string("model.") + key, "a non-empty value is not supported");
      }
    }
  }
  t.bpe = std::make_unique<Bpe>(std::move(config), source_);
}

void Loader::load_normalizer(const json& n, const std::string& field, TokenizerImpl& t) {
  const std::string type = type_of(n, field);
  if (type == "NFC") {
    t.nfc = true;
  } else if (type == "Sequence") {
    const json& list = member(n, field, "normalizers");
    if (!list.is_array()) bad(field + ".normalizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i) load_normalizer(list[i], fmt::format("{}.normalizers[{}]", field, i), t);
  } else {
    bad(field + ".type", fmt::format("unsupported normalizer \"{}\" (only NFC)", type));
  }
}

void Loader::load_pre_tokenizer(const json& p, const std::string& field, TokenizerImpl& t) {
  const std::string type = type_of(p, field);
  if (saw_byte_level_) bad(field, "steps after ByteLevel are not supported");
  if (type == "Sequence") {
    const json& list = member(p, field, "pretokenizers");
    if (!list.is_array()) bad(field + ".pretokenizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      load_pre_tokenizer(list[i], fmt::format("{}.pretokenizers[{}]", field, i), t);
    }
  } else if (type == "Split") {
    const json& pattern = member(p, field, "pattern");
    if (!pattern.is_object()) bad(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    std::string regex;
    if (const json* r = optional_member(pattern, "Regex")) {
      regex = string_of(*r, field + ".pattern.Regex");
    } else if (const json* s = optional_member(pattern, "String")) {
      for (char c : string_of(*s, field + ".pattern.String")) {  // a literal: escape ASCII punctuation
        if (static_cast<uint8_t>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c))) regex += '\\';
        regex += c;
      }
    } else {
      bad(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    const std::string behavior = string_of(member(p, field, "behavior"), field + ".behavior");
    if (behavior != "Isolated") bad(field + ".behavior", fmt::format("unsupported \"{}\" (only Isolated)", behavior));
    if (bool_of(p, field, "invert", false)) bad(field + ".invert", "true is not supported");
    PreTokenizeStep step;
    step.regex = std::make_shared<Regex>(regex, fmt::format("{}: {}.pattern", source_, field));
    t.pre_tokenize_steps.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    PreTokenizeStep step;
    step.kind = PreTokenizeStep::Kind::kByteLevel;
    step.add_prefix_space = bool_of(p, field, "add_prefix_space", true);
    if (bool_of(p, field, "use_regex", true)) {
      step.regex = std::make_shared<Regex>(kGpt2Pattern, fmt::format("{}: {} (GPT-2 pattern)", source_, field));
    }
    t.pre_tokenize_steps.push_back(std::move(step));
    saw_byte_level_ = true;
  } else {
    bad(field + ".type", fmt::format("unsupported pre-tokenizer \"{}\" (only Sequence, Split, ByteLevel)", type));
  }
}

void Loader::load_decoder(const json& d, const std::string& field) {
  const std::string type = type_of(d, field);
  if (type != "ByteLevel") bad(field + ".type", fmt::format("unsupported decoder \"{}\" (only ByteLevel)", type));
}

void Loader::load_added_tokens(const json& list, TokenizerImpl& t) {
  if (!list.is_array()) bad("added_tokens", fmt::format("expected an array, got {}", list.type_name()));
  const auto& vocab = t.bpe->vocab();
  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  int64_t max_added_id = -1;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = fmt::format("added_tokens[{}]", i);
    const json& a = list[i];
    if (!a.is_object()) bad(field, fmt::format("expected an object, got {}", a.type_name()));
    AddedToken token;
    id_of(member(a, field, "id"), field + ".id");  // checked, but see below
    token.content = string_of(member(a, field, "content"), field + ".content");
    if (token.content.empty()) bad(field + ".content", "empty");
    if (utf8::find_invalid(token.content) != std::string::npos) bad(field + ".content", "not valid UTF-8");
    token.special = bool_of(a, field, "special", false);
    token.single_word = bool_of(a, field, "single_word", false);
    token.lstrip = bool_of(a, field, "lstrip", false);
    token.rstrip = bool_of(a, field, "rstrip", false);
    token.normalized = bool_of(a, field, "normalized", !token.special);
    // The id is the one Hugging Face assigns when it loads the file (it warns, and goes on,
    // when the file says otherwise): the model's id for text in model.vocab, else the next
    // id after the added tokens so far (starting at the number of vocab entries).
    if (const auto it = vocab.find(token.content); it != vocab.end()) {
      token.id = it->second;
    } else if (max_added_id < 0) {
      token.id = static_cast<int32_t>(vocab.size());
    } else {
      token.id = max_added_id >= static_cast<int64_t>(vocab.size()) || vocab.empty()
                     ? static_cast<int32_t>(max_added_id + 1)
                     : static_cast<int32_t>(vocab.size());
    }
    if (token.id > kMaxId) bad(field + ".id", "too many added tokens");
    max_added_id = std::max<int64_t>(max_added_id, token.id);
    const auto [it, inserted] = t.added_by_content.emplace(token.content, token.id);
    if (!inserted) bad(field + ".content", fmt::format("\"{}\" is listed twice", token.content));
    t.added_tokens.push_back(token);
    if (token.normalized) {
      normalized_patterns.push_back(t.nfc ? nfc(token.content) : token.content);
      normalized.push_back(std::move(token));
    } else {
      raw_patterns.push_back(token.content);
      raw.push_back(std::move(token));
    }
  }
  // Hugging Face orders the automaton's patterns special tokens first.
  const auto special_first = [](std::vector<AddedToken>& tokens, std::vector<std::string>& patterns) {
    std::vector<size_t> order;
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i].special == (pass == 0)) order.push_back(i);
      }
    }
    std::vector<AddedToken> t2;
    std::vector<std::string> p2;
    for (size_t i : order) {
      t2.push_back(tokens[i]);
      p2.push_back(patterns[i]);
    }
    tokens = std::move(t2);
    patterns = std::move(p2);
  };
  special_first(raw, raw_patterns);
  special_first(normalized, normalized_patterns);
  t.raw_matcher = std::make_unique<AddedTokenMatcher>(raw, raw_patterns);
  t.normalized_matcher = std::make_unique<AddedTokenMatcher>(normalized, normalized_patterns);
}

void Loader::build_tables(TokenizerImpl& t) {
  int32_t size = 0;
  for (const auto& [token, id] : t.bpe->vocab()) size = std::max(size, id + 1);
  for (const AddedToken& a : t.added_tokens) size = std::max(size, a.id + 1);
  t.kind.assign(size, TokenizerImpl::kUnknown);
  t.token_text.assign(size, {});
  t.token_bytes.assign(size, {});
  const ByteLevel& bl = ByteLevel::get();
  for (const auto& [token, id] : t.bpe->vocab()) {
    if (t.kind[id] != TokenizerImpl::kUnknown) {
      bad("model.vocab", fmt::format("id {} is used by both \"{}\" and \"{}\"", id, t.token_text[id], token));
    }
    t.kind[id] = TokenizerImpl::kModel;
    t.token_text[id] = token;
    t.token_bytes[id] = bl.decode_token(token);
  }
  for (size_t i = 0; i < t.added_tokens.size(); ++i) {
    const AddedToken& a = t.added_tokens[i];
    if (t.kind[a.id] == TokenizerImpl::kAdded || t.kind[a.id] == TokenizerImpl::kSpecial ||
        (t.kind[a.id] == TokenizerImpl::kModel && t.token_text[a.id] != a.content)) {
      bad(fmt::format("added_tokens[{}].id", i), fmt::format("id {} of \"{}\" is already \"{}\"", a.id, a.content, t.token_text[a.id]));
    }
    t.kind[a.id] = a.special ? TokenizerImpl::kSpecial : TokenizerImpl::kAdded;
    // HF keeps the normalized text of a normalized token as its text (and decodes that).
    t.token_text[a.id] = a.normalized && t.nfc ? nfc(a.content) : a.content;
    t.token_bytes[a.id] = bl.decode_token(t.token_text[a.id]);
  }
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
  try {
    return Tokenizer(Loader(source).load(root));
  } catch (const json::exception& e) {  // a type mismatch the loader did not name itself
    fail("{}: unexpected JSON content: {}", source, e.what());
  }
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  return from_json(read_file(path), path);
}

}  // namespace nanovllm
