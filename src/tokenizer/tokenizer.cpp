#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <deque>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"
#include "util/check.h"

namespace nanovllm {

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special, size_t max_ids) const {
  const TokenizerImpl& t = *impl_;
  if (const size_t bad = utf8::find_invalid(text); bad != std::string_view::npos) {
    fail("Tokenizer::encode: text is not valid UTF-8 (byte {} of {})", bad, text.size());
  }
  std::vector<int32_t> ids;
  ids.reserve(std::min(text.size() / 3 + 1, max_ids));
  std::vector<Segment> segments, sub_segments;
  std::vector<std::string_view> pieces;
  std::deque<std::string> arena;

  const auto encode_plain = [&](std::string_view s, bool at_input_start) {
    pieces.clear();
    pre_tokenize(t.pre_tokenize_steps, s, at_input_start, pieces, arena);
    for (std::string_view piece : pieces) {
      if (ids.size() > max_ids) break;
      t.bpe->encode_piece(piece, ids);
    }
    arena.clear();
  };

  t.raw_matcher->split(text, parse_special, segments);
  for (const Segment& seg : segments) {
    if (ids.size() > max_ids) break;
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    const std::string_view raw = text.substr(seg.begin, seg.end - seg.begin);
    std::string normalized;
    const std::string_view s =
        t.normalizer.empty() ? raw : (normalized = normalize(t.normalizer, raw), std::string_view(normalized));
    if (t.normalized_matcher->empty()) {
      encode_plain(s, seg.begin == 0);
      continue;
    }
    sub_segments.clear();
    t.normalized_matcher->split(s, parse_special, sub_segments);
    for (const Segment& sub : sub_segments) {
      if (ids.size() > max_ids) break;
      if (sub.id >= 0) {
        ids.push_back(sub.id);
      } else {
        encode_plain(s.substr(sub.begin, sub.end - sub.begin), seg.begin == 0 && sub.begin == 0);
      }
    }
  }
  return ids;
}

std::vector<int32_t> Tokenizer::encode_with_special_tokens(std::string_view text, bool parse_special,
                                                           size_t max_ids) const {
  const TokenizerImpl& t = *impl_;
  std::vector<int32_t> ids = t.prefix_special_ids;
  const std::vector<int32_t> body = encode(text, parse_special, max_ids);
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), t.suffix_special_ids.begin(), t.suffix_special_ids.end());
  return ids;
}

const std::vector<int32_t>& Tokenizer::prefix_special_ids() const { return impl_->prefix_special_ids; }
const std::vector<int32_t>& Tokenizer::suffix_special_ids() const { return impl_->suffix_special_ids; }

const std::string* Tokenizer::token_bytes(int32_t id, bool skip_special_tokens) const {
  const TokenizerImpl& t = *impl_;
  if (id < 0 || static_cast<size_t>(id) >= t.kind.size()) return nullptr;
  const uint8_t kind = t.kind[id];
  if (kind == TokenizerImpl::kUnknown) return nullptr;
  if (skip_special_tokens && kind == TokenizerImpl::kSpecial) return nullptr;
  return &t.token_bytes[id];
}

void Tokenizer::decode_step(DecodeState& state, int32_t id, bool skip_special_tokens, std::string& out) const {
  const TokenizerImpl& t = *impl_;
  if (token_bytes(id, skip_special_tokens) == nullptr) return;
  state.add(t.token_text[id], t.token_bytes[id], t.fallback_byte[id], out);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string out;
  if (impl_->decoder.kind == DecoderConfig::Kind::kByteLevel) {
    // The same result as the steps below (ByteLevel decodes the bytes of all tokens at once),
    // in one pass over the bytes.
    std::string bytes;
    for (int32_t id : ids) {
      if (const std::string* b = token_bytes(id, skip_special_tokens)) bytes += *b;
    }
    out.reserve(bytes.size());
    utf8::append_lossy(out, bytes, /*final_chunk=*/true);
    return out;
  }
  DecodeState state(impl_->decoder);
  for (int32_t id : ids) decode_step(state, id, skip_special_tokens, out);
  state.finish(out);
  return out;
}

const DecoderConfig& Tokenizer::decoder_config() const { return impl_->decoder; }

int32_t Tokenizer::token_to_id(std::string_view token) const {
  const TokenizerImpl& t = *impl_;
  const std::string key(token);
  if (const auto it = t.added_by_content.find(key); it != t.added_by_content.end()) return it->second;
  if (const auto it = t.bpe->vocab().find(key); it != t.bpe->vocab().end()) return it->second;
  return -1;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const TokenizerImpl& t = *impl_;
  if (id < 0 || static_cast<size_t>(id) >= t.kind.size()) return "";
  return t.token_text[id];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->kind.size()); }

bool Tokenizer::is_special(int32_t id) const {
  const TokenizerImpl& t = *impl_;
  return id >= 0 && static_cast<size_t>(id) < t.kind.size() && t.kind[id] == TokenizerImpl::kSpecial;
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added_tokens; }

}  // namespace nanovllm
