// tokenizer.json's normalizer, pre_tokenizer, decoder and post_processor -> TokenizerImpl.
// Each supported type is read as Hugging Face reads it (same defaults); any other type, or
// a combination whose result we could not reproduce exactly, is an error naming the field.
#include "tokenizer/tokenizer_loader.h"

#include "tokenizer/utf8.h"

namespace nanovllm {

void TokenizerLoader::load_normalizer(const json& n, const std::string& field, TokenizerImpl& t) {
  const std::string type = type_of(n, field);
  NormalizerStep step;
  if (type == "Sequence") {
    const json& list = member(n, field, "normalizers");
    if (!list.is_array()) bad(field + ".normalizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i) load_normalizer(list[i], fmt::format("{}.normalizers[{}]", field, i), t);
    return;
  } else if (type == "NFC") {
    step.kind = NormalizerStep::Kind::kNfc;
  } else if (type == "Prepend") {
    step.kind = NormalizerStep::Kind::kPrepend;
    step.text = string_of(member(n, field, "prepend"), field + ".prepend");
  } else if (type == "Replace") {
    step.kind = NormalizerStep::Kind::kReplace;
    step.pattern = pattern_of(n, field);
    step.text = string_of(member(n, field, "content"), field + ".content");
  } else {
    bad(field + ".type", fmt::format("unsupported normalizer \"{}\" (supported: NFC, Prepend, Replace, Sequence)", type));
  }
  t.normalizer.push_back(std::move(step));
}

namespace {

bool parse_split_behavior(const std::string& name, SplitBehavior& out) {
  static const std::pair<const char*, SplitBehavior> kNames[] = {
      {"Removed", SplitBehavior::kRemoved},
      {"Isolated", SplitBehavior::kIsolated},
      {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
      {"MergedWithNext", SplitBehavior::kMergedWithNext},
      {"Contiguous", SplitBehavior::kContiguous},
  };
  for (const auto& [n, b] : kNames) {
    if (name == n) {
      out = b;
      return true;
    }
  }
  return false;
}

}  // namespace

void TokenizerLoader::load_pre_tokenizer(const json& p, const std::string& field, TokenizerImpl& t) {
  const std::string type = type_of(p, field);
  if (saw_byte_level_) bad(field, "steps after ByteLevel are not supported");
  PreTokenizeStep step;
  if (type == "Sequence") {
    const json& list = member(p, field, "pretokenizers");
    if (!list.is_array()) bad(field + ".pretokenizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      load_pre_tokenizer(list[i], fmt::format("{}.pretokenizers[{}]", field, i), t);
    }
    return;
  } else if (type == "Split") {
    step.kind = PreTokenizeStep::Kind::kSplit;
    step.regex = pattern_of(p, field);
    const std::string behavior = string_of(member(p, field, "behavior"), field + ".behavior");
    if (!parse_split_behavior(behavior, step.behavior)) {
      bad(field + ".behavior", fmt::format("unknown \"{}\" (Removed, Isolated, MergedWithPrevious, "
                                           "MergedWithNext, Contiguous)", behavior));
    }
    step.invert = bool_of(p, field, "invert", false);
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizeStep::Kind::kByteLevel;
    step.add_prefix_space = bool_of(p, field, "add_prefix_space", true);
    if (bool_of(p, field, "use_regex", true)) {
      step.regex = std::make_shared<Regex>(kGpt2Pattern, fmt::format("{}: {} (GPT-2 pattern)", source_, field));
    }
    saw_byte_level_ = true;
  } else if (type == "Metaspace") {
    step.kind = PreTokenizeStep::Kind::kMetaspace;
    step.replacement = char_of(member(p, field, "replacement"), field + ".replacement");
    const std::string scheme = optional_member(p, "prepend_scheme")
                                   ? string_of(p["prepend_scheme"], field + ".prepend_scheme")
                                   : "always";
    if (scheme == "always") {
      step.prepend = PreTokenizeStep::Prepend::kAlways;
    } else if (scheme == "first") {
      step.prepend = PreTokenizeStep::Prepend::kFirst;
    } else if (scheme == "never") {
      step.prepend = PreTokenizeStep::Prepend::kNever;
    } else {
      bad(field + ".prepend_scheme", fmt::format("unknown \"{}\" (always, first, never)", scheme));
    }
    if (!bool_of(p, field, "add_prefix_space", true) && step.prepend != PreTokenizeStep::Prepend::kNever) {
      bad(field + ".add_prefix_space", "false does not match prepend_scheme (Hugging Face refuses it too)");
    }
    step.metaspace_split = bool_of(p, field, "split", true);
  } else {
    bad(field + ".type", fmt::format("unsupported pre-tokenizer \"{}\" (supported: Sequence, Split, ByteLevel, "
                                     "Metaspace)", type));
  }
  t.pre_tokenize_steps.push_back(std::move(step));
}

void TokenizerLoader::load_decoder(const json& d, const std::string& field, TokenizerImpl& t) {
  // The chain, flattened: (field, object).
  std::vector<std::pair<std::string, const json*>> steps;
  const std::string top_type = type_of(d, field);
  if (top_type == "Sequence") {
    const json& list = member(d, field, "decoders");
    if (!list.is_array()) bad(field + ".decoders", "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string f = fmt::format("{}.decoders[{}]", field, i);
      if (type_of(list[i], f) == "Sequence") bad(f + ".type", "a nested Sequence is not supported");
      steps.emplace_back(f, &list[i]);
    }
  } else {
    steps.emplace_back(field, &d);
  }
  DecoderConfig& c = t.decoder;
  c.kind = DecoderConfig::Kind::kPieces;
  // SentencePiece-style steps must come in this order (each optional, Replace repeatable).
  enum Phase { kReplace, kByteFallback, kFuse, kStrip };
  int phase = kReplace;
  bool saw_fuse = false;
  const auto advance = [&](const std::string& f, int to, const char* name) {
    if (to < phase || (to == phase && to != kReplace && to != kFuse)) {
      bad(f, fmt::format("{} here is not supported (supported order: Replace..., ByteFallback, Fuse, Strip)", name));
    }
    phase = to;
  };
  for (const auto& [f, step] : steps) {
    const std::string type = type_of(*step, f);
    if (type == "ByteLevel" || type == "Metaspace") {
      if (steps.size() != 1) bad(f + ".type", fmt::format("{} is supported only as the whole decoder", type));
      if (type == "ByteLevel") {
        c.kind = DecoderConfig::Kind::kByteLevel;
        return;
      }
      c.metaspace = true;
      c.metaspace_replacement = char_of(member(*step, f, "replacement"), f + ".replacement");
      const std::string scheme = optional_member(*step, "prepend_scheme")
                                     ? string_of((*step)["prepend_scheme"], f + ".prepend_scheme")
                                     : "always";
      if (scheme != "always" && scheme != "first" && scheme != "never") {
        bad(f + ".prepend_scheme", fmt::format("unknown \"{}\" (always, first, never)", scheme));
      }
      if (!bool_of(*step, f, "add_prefix_space", true) && scheme != "never") {
        bad(f + ".add_prefix_space", "false does not match prepend_scheme (Hugging Face refuses it too)");
      }
      c.metaspace_drop_first = scheme != "never";
      return;
    }
    if (type == "Replace") {
      advance(f, kReplace, "Replace");
      decoder_replacements_.emplace_back(pattern_of(*step, f), string_of(member(*step, f, "content"), f + ".content"));
    } else if (type == "ByteFallback") {
      advance(f, kByteFallback, "ByteFallback");
      c.byte_fallback = true;
    } else if (type == "Fuse") {
      advance(f, kFuse, "Fuse");
      saw_fuse = true;
    } else if (type == "Strip") {
      advance(f, kStrip, "Strip");
      if (!saw_fuse) bad(f, "Strip before Fuse (per token) is not supported");
      c.strip_content = char_of(member(*step, f, "content"), f + ".content");
      const json& start = member(*step, f, "start");
      const json& stop = member(*step, f, "stop");
      if (!start.is_number_unsigned()) bad(f + ".start", "expected a non-negative integer");
      if (!stop.is_number_unsigned() || stop.get<uint64_t>() != 0) bad(f + ".stop", "only 0 is supported");
      c.strip_start = start.get<size_t>();
    } else {
      bad(f + ".type", fmt::format("unsupported decoder \"{}\" (supported: ByteLevel; Metaspace; Replace, "
                                   "ByteFallback, Fuse, Strip)", type));
    }
  }
}

void TokenizerLoader::load_post_processor(const json& p, const std::string& field, TokenizerImpl& t) {
  const std::string type = type_of(p, field);
  if (type == "ByteLevel") return;  // changes offsets only
  if (type == "Sequence") {
    const json& list = member(p, field, "processors");
    if (!list.is_array()) bad(field + ".processors", "expected an array");
    for (size_t i = 0; i < list.size(); ++i) load_post_processor(list[i], fmt::format("{}.processors[{}]", field, i), t);
    return;
  }
  if (type != "TemplateProcessing") {
    bad(field + ".type", fmt::format("unsupported post-processor \"{}\" (supported: TemplateProcessing, ByteLevel, "
                                     "Sequence)", type));
  }
  // Only the template for one sequence ("single") is used: nanovllm never encodes pairs.
  const json& single = member(p, field, "single");
  if (!single.is_array()) bad(field + ".single", "expected an array of {\"SpecialToken\"} / {\"Sequence\"} items");
  const json& specials = member(p, field, "special_tokens");
  if (!specials.is_object()) bad(field + ".special_tokens", "expected an object");
  std::vector<int32_t> prefix, suffix;
  bool saw_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string f = fmt::format("{}.single[{}]", field, i);
    const json& item = single[i];
    if (!item.is_object() || item.size() != 1) bad(f, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    if (const json* seq = optional_member(item, "Sequence")) {
      const std::string id = string_of(member(*seq, f + ".Sequence", "id"), f + ".Sequence.id");
      if (id != "A") bad(f + ".Sequence.id", fmt::format("\"{}\" in the single-sequence template (expected A)", id));
      if (saw_sequence) bad(f, "the sequence appears twice");
      saw_sequence = true;
    } else if (const json* tok = optional_member(item, "SpecialToken")) {
      const std::string name = string_of(member(*tok, f + ".SpecialToken", "id"), f + ".SpecialToken.id");
      const auto it = specials.find(name);
      if (it == specials.end()) bad(f + ".SpecialToken.id", fmt::format("\"{}\" is not in special_tokens", name));
      const std::string sf = fmt::format("{}.special_tokens[\"{}\"].ids", field, name);
      const json& ids = member(*it, sf.substr(0, sf.size() - 4), "ids");
      if (!ids.is_array()) bad(sf, "expected an array of ids");
      for (size_t k = 0; k < ids.size(); ++k) {
        (saw_sequence ? suffix : prefix).push_back(id_of(ids[k], fmt::format("{}[{}]", sf, k)));
        post_processor_id_fields_.emplace_back(fmt::format("{}[{}]", sf, k), (saw_sequence ? suffix : prefix).back());
      }
    } else {
      bad(f, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    }
  }
  if (!saw_sequence) bad(field + ".single", "has no {\"Sequence\": {\"id\": \"A\"}} item");
  // A later processor wraps what the earlier ones made.
  t.prefix_special_ids.insert(t.prefix_special_ids.begin(), prefix.begin(), prefix.end());
  t.suffix_special_ids.insert(t.suffix_special_ids.end(), suffix.begin(), suffix.end());
}

void TokenizerLoader::check_post_processor_ids(const TokenizerImpl& t) const {
  for (const auto& [f, id] : post_processor_id_fields_) {
    if (static_cast<size_t>(id) >= t.kind.size() || t.kind[id] == TokenizerImpl::kUnknown) {
      bad(f, fmt::format("id {} is neither in model.vocab nor an added token", id));
    }
  }
}

}  // namespace nanovllm
