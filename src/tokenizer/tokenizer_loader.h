#pragma once
// tokenizer.json -> TokenizerImpl (internal to src/tokenizer). Every rejection names the file
// and the JSON field. tokenizer_loader.cpp reads the model, the added tokens and builds the
// id tables; tokenizer_loader_pipeline.cpp reads the normalizer, pre-tokenizer, decoder and
// post-processor.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer_impl.h"
#include "util/check.h"

namespace nanovllm {

class TokenizerLoader {
 public:
  using json = nlohmann::json;
  explicit TokenizerLoader(std::string source) : source_(std::move(source)) {}

  std::unique_ptr<TokenizerImpl> load(const json& root);

 private:
  // --- JSON access that names the field in every error
  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    fail("{}: {}: {}", source_, field, what);
  }
  const json& member(const json& obj, const std::string& field, const char* key) const;
  const json* optional_member(const json& obj, const char* key) const;
  std::string string_of(const json& v, const std::string& field) const;
  bool bool_of(const json& obj, const std::string& field, const char* key, bool fallback) const;
  int32_t id_of(const json& v, const std::string& field) const;
  std::string type_of(const json& obj, const std::string& field) const;
  // One code point, as serde reads a Rust `char`.
  std::string char_of(const json& v, const std::string& field) const;
  // {"String": s} (a literal) or {"Regex": r}, as a compiled regex.
  std::shared_ptr<const Regex> pattern_of(const json& obj, const std::string& field) const;

  // --- tokenizer_loader.cpp
  void load_model(const json& model, bool byte_level, TokenizerImpl& t);
  void load_added_tokens(const json& list, TokenizerImpl& t);
  void build_tables(TokenizerImpl& t);

  // --- tokenizer_loader_pipeline.cpp
  void load_normalizer(const json& n, const std::string& field, TokenizerImpl& t);
  void load_pre_tokenizer(const json& p, const std::string& field, TokenizerImpl& t);
  void load_decoder(const json& d, const std::string& field, TokenizerImpl& t);
  void load_post_processor(const json& p, const std::string& field, TokenizerImpl& t);
  void check_post_processor_ids(const TokenizerImpl& t) const;

  std::string source_;
  bool saw_byte_level_ = false;
  // Decoder Replace steps, applied to every token's text when the tables are built.
  std::vector<std::pair<std::shared_ptr<const Regex>, std::string>> decoder_replacements_;
  // Every id the post-processor adds, with its field, checked once the tables exist.
  std::vector<std::pair<std::string, int32_t>> post_processor_id_fields_;
};

}  // namespace nanovllm
