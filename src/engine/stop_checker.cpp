#include "engine/stop_checker.h"

#include <algorithm>
#include <utility>

namespace nanovllm {

StopChecker::StopChecker(std::vector<std::string> stop, bool include_stop_str_in_output)
    : stop_(std::move(stop)), include_(include_stop_str_in_output) {
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
}

std::string StopChecker::add(std::string_view delta, bool can_stop) {
  if (stopped_) return {};
  pending_.append(delta);
  if (stop_.empty()) return std::exchange(pending_, {});
  if (can_stop) {
    size_t best = std::string::npos;
    const std::string* hit = nullptr;
    for (const std::string& s : stop_) {
      const size_t at = pending_.find(s);
      if (at < best) {
        best = at;
        hit = &s;
      }
    }
    if (hit) {
      stopped_ = true;
      matched_ = *hit;
      std::string out = pending_.substr(0, best + (include_ ? hit->size() : 0));
      pending_.clear();
      return out;
    }
  }
  // Hold back the longest suffix of pending_ that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& s : stop_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopChecker::finish() {
  if (stopped_) return {};
  return std::exchange(pending_, {});
}

}  // namespace nanovllm
