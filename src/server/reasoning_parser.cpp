#include "server/reasoning_parser.h"

#include "server/tag_scanner.h"

namespace nanovllm::server {

namespace {
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
}  // namespace

ReasoningDelta ReasoningParser::add(const std::string& delta) {
  pending_ += delta;
  return drain(false);
}

ReasoningDelta ReasoningParser::finish() { return drain(true); }

ReasoningDelta ReasoningParser::parse(const std::string& text, bool starts_in_reasoning) {
  ReasoningParser p(starts_in_reasoning);
  ReasoningDelta a = p.add(text), b = p.finish();
  return {a.reasoning + b.reasoning, a.content + b.content};
}

ReasoningDelta ReasoningParser::drain(bool final_chunk) {
  ReasoningDelta out;
  for (;;) {
    if (state_ == State::START) {
      // Undecided: leading whitespace, then maybe "<think>"; a "</think>" anywhere also decides.
      size_t first = pending_.find_first_not_of(" \t\r\n");
      std::string_view rest = first == std::string::npos ? "" : std::string_view(pending_).substr(first);
      if (rest.substr(0, kThinkOpen.size()) == kThinkOpen) {
        pending_.erase(0, first + kThinkOpen.size());
        state_ = State::REASONING;
        continue;
      }
      if (!final_chunk && (rest.empty() || kThinkOpen.substr(0, rest.size()) == rest)) return out;
      state_ = State::CONTENT;  // no "<think>": all content
      continue;
    }
    if (state_ == State::REASONING) {
      size_t close = pending_.find(kThinkClose);
      if (close != std::string::npos) {
        out.reasoning += pending_.substr(0, close);
        pending_.erase(0, close + kThinkClose.size());
        state_ = State::CONTENT;
        continue;
      }
      size_t keep = final_chunk ? 0 : partial_tag_suffix(pending_, kThinkClose);
      out.reasoning += pending_.substr(0, pending_.size() - keep);
      pending_.erase(0, pending_.size() - keep);
      return out;
    }
    out.content += pending_;
    pending_.clear();
    return out;
  }
}

}  // namespace nanovllm::server
