// tokenizer.json -> TokenizerImpl: the JSON helpers, the model, the added tokens and the
// id tables (the rest is in tokenizer_loader_pipeline.cpp).
#include "tokenizer/tokenizer_loader.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/file.h"

namespace nanovllm {

namespace {

// Ids beyond this are rejected: tables are indexed by id.
constexpr int64_t kMaxId = (1 << 24) - 1;

}  // namespace

const TokenizerLoader::json& TokenizerLoader::member(const json& obj, const std::string& field, const char* key) const {
  const auto it = obj.find(key);
  if (it == obj.end()) bad(field.empty() ? key : field + "." + key, "missing");
  return *it;
}

const TokenizerLoader::json* TokenizerLoader::optional_member(const json& obj, const char* key) const {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string TokenizerLoader::string_of(const json& v, const std::string& field) const {
  if (!v.is_string()) bad(field, fmt::format("expected a string, got {}", v.type_name()));
  return v.get<std::string>();
}

bool TokenizerLoader::bool_of(const json& obj, const std::string& field, const char* key, bool fallback) const {
  const json* v = optional_member(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) bad(field + "." + key, fmt::format("expected a boolean, got {}", v->type_name()));
  return v->get<bool>();
}

int32_t TokenizerLoader::id_of(const json& v, const std::string& field) const {
  if (!v.is_number_integer()) bad(field, fmt::format("expected an integer id, got {}", v.type_name()));
  const int64_t id = v.get<int64_t>();
  if (id < 0 || id > kMaxId) bad(field, fmt::format("id {} out of range [0, {}]", id, kMaxId));
  return static_cast<int32_t>(id);
}

std::string TokenizerLoader::type_of(const json& obj, const std::string& field) const {
  if (!obj.is_object()) bad(field, fmt::format("expected an object, got {}", obj.type_name()));
  return string_of(member(obj, field, "type"), field + ".type");
}

std::string TokenizerLoader::char_of(const json& v, const std::string& field) const {
  const std::string s = string_of(v, field);
  size_t pos = 0;
  if (s.empty() || utf8::find_invalid(s) != std::string::npos || (utf8::next(s, pos), pos != s.size())) {
    bad(field, fmt::format("expected one character, got \"{}\"", s));
  }
  return s;
}

std::shared_ptr<const Regex> TokenizerLoader::pattern_of(const json& obj, const std::string& field) const {
  const json& pattern = member(obj, field, "pattern");
  const std::string where = field + ".pattern";
  if (!pattern.is_object()) bad(where, "expected {\"Regex\": ...} or {\"String\": ...}");
  if (const json* r = optional_member(pattern, "Regex")) {
    return std::make_shared<Regex>(string_of(*r, where + ".Regex"), fmt::format("{}: {}", source_, where));
  }
  if (const json* s = optional_member(pattern, "String")) {
    const std::string literal = string_of(*s, where + ".String");
    if (literal.empty()) bad(where + ".String", "an empty pattern is not supported");
    return std::make_shared<Regex>(escape_literal(literal), fmt::format("{}: {}", source_, where));
  }
  bad(where, "expected {\"Regex\": ...} or {\"String\": ...}");
}

std::unique_ptr<TokenizerImpl> TokenizerLoader::load(const json& root) {
  if (!root.is_object()) bad("(top level)", fmt::format("expected an object, got {}", root.type_name()));
  auto t = std::make_unique<TokenizerImpl>();
  t->source = source_;
  const json& model = member(root, "", "model");
  if (const json* n = optional_member(root, "normalizer")) load_normalizer(*n, "normalizer", *t);
  if (const json* p = optional_member(root, "pre_tokenizer")) load_pre_tokenizer(*p, "pre_tokenizer", *t);
  // The model's alphabet follows the pre-tokenizer: byte-level with a ByteLevel step, else
  // the characters of the normalized text (SentencePiece-style).
  load_model(model, saw_byte_level_, *t);
  const json* d = optional_member(root, "decoder");
  if (d == nullptr) bad("decoder", "missing or null (Hugging Face then joins tokens with spaces; not supported)");
  load_decoder(*d, "decoder", *t);
  const bool byte_level_decoder = t->decoder.kind == DecoderConfig::Kind::kByteLevel;
  if (saw_byte_level_ && !byte_level_decoder) {
    bad("decoder", "the pre_tokenizer has a ByteLevel step, so the decoder must be ByteLevel");
  }
  if (!saw_byte_level_ && byte_level_decoder) {
    bad("pre_tokenizer", "has no ByteLevel step, but the decoder is ByteLevel (a byte-level BPE needs both)");
  }
  if (const json* a = optional_member(root, "added_tokens")) {
    load_added_tokens(*a, *t);
  } else {
    t->raw_matcher = std::make_unique<AddedTokenMatcher>(std::vector<AddedToken>{}, std::vector<std::string>{});
    t->normalized_matcher = std::make_unique<AddedTokenMatcher>(std::vector<AddedToken>{}, std::vector<std::string>{});
  }
  if (const json* p = optional_member(root, "post_processor")) load_post_processor(*p, "post_processor", *t);
  build_tables(*t);
  check_post_processor_ids(*t);
  return t;
}

void TokenizerLoader::load_model(const json& model, bool byte_level, TokenizerImpl& t) {
  if (!model.is_object()) bad("model", fmt::format("expected an object, got {}", model.type_name()));
  if (const json* type = optional_member(model, "type")) {
    const std::string name = string_of(*type, "model.type");
    if (name != "BPE") bad("model.type", fmt::format("unsupported model type \"{}\" (only BPE)", name));
  }
  BpeConfig config;
  config.byte_level = byte_level;
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

void TokenizerLoader::load_added_tokens(const json& list, TokenizerImpl& t) {
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
      normalized_patterns.push_back(normalize(t.normalizer, token.content));
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

void TokenizerLoader::build_tables(TokenizerImpl& t) {
  int32_t size = 0;
  for (const auto& [token, id] : t.bpe->vocab()) size = std::max(size, id + 1);
  for (const AddedToken& a : t.added_tokens) size = std::max(size, a.id + 1);
  t.kind.assign(size, TokenizerImpl::kUnknown);
  t.token_text.assign(size, {});
  t.token_bytes.assign(size, {});
  t.fallback_byte.assign(size, -1);
  for (const auto& [token, id] : t.bpe->vocab()) {
    if (t.kind[id] != TokenizerImpl::kUnknown) {
      bad("model.vocab", fmt::format("id {} is used by both \"{}\" and \"{}\"", id, t.token_text[id], token));
    }
    t.kind[id] = TokenizerImpl::kModel;
    t.token_text[id] = token;
  }
  for (size_t i = 0; i < t.added_tokens.size(); ++i) {
    const AddedToken& a = t.added_tokens[i];
    if (t.kind[a.id] == TokenizerImpl::kAdded || t.kind[a.id] == TokenizerImpl::kSpecial ||
        (t.kind[a.id] == TokenizerImpl::kModel && t.token_text[a.id] != a.content)) {
      bad(fmt::format("added_tokens[{}].id", i), fmt::format("id {} of \"{}\" is already \"{}\"", a.id, a.content, t.token_text[a.id]));
    }
    t.kind[a.id] = a.special ? TokenizerImpl::kSpecial : TokenizerImpl::kAdded;
    // HF keeps the normalized text of a normalized token as its text (and decodes that).
    t.token_text[a.id] = a.normalized ? normalize(t.normalizer, a.content) : a.content;
  }
  // What each token contributes to the decoder's stream on its own.
  const ByteLevel& bl = ByteLevel::get();
  std::unique_ptr<Regex> metaspace;
  if (t.decoder.metaspace) {
    metaspace = std::make_unique<Regex>(escape_literal(t.decoder.metaspace_replacement), source_ + ": decoder.replacement");
  }
  for (size_t id = 0; id < t.token_text.size(); ++id) {
    if (t.kind[id] == TokenizerImpl::kUnknown) continue;
    const std::string& text = t.token_text[id];
    if (t.decoder.kind == DecoderConfig::Kind::kByteLevel) {
      t.token_bytes[id] = bl.decode_token(text);
      continue;
    }
    std::string piece = text;
    for (const auto& [pattern, content] : decoder_replacements_) piece = replace_matches(*pattern, piece, content);
    if (metaspace) piece = replace_matches(*metaspace, piece, " ");
    if (t.decoder.byte_fallback) {
      t.fallback_byte[id] = static_cast<int16_t>(byte_fallback_value(piece));
      if (t.fallback_byte[id] >= 0) piece.assign(1, static_cast<char>(t.fallback_byte[id]));
    }
    t.token_bytes[id] = std::move(piece);
  }
}

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& source) {
  using nlohmann::json;
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
  try {
    return Tokenizer(TokenizerLoader(source).load(root));
  } catch (const json::exception& e) {  // a type mismatch the loader did not name itself
    fail("{}: unexpected JSON content: {}", source, e.what());
  }
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  return from_json(read_file(path), path);
}

}  // namespace nanovllm
