#pragma once
// StopChecker: SamplingParams::stop over streamed text (vLLM's stop strings).
//
// Feed it the text deltas of one sample (from the incremental detokenizer) in order. add()
// returns the part that is safe to show now: it holds back any tail that could still become a
// stop string (a suffix of the text that is a proper prefix of some stop string), so streamed
// text never shows a stop string or part of one. Once a stop string is complete, stopped()
// turns true, add() returns the text up to the match (and the match itself with
// include_stop_str_in_output), and the caller ends the request with finish_reason "stop"
// (e.g. LLMEngine::abort, keeping the tokens generated so far). When the request ends otherwise,
// finish() returns the held-back tail. Concatenating every add() and finish() gives the output
// text: the whole text, or everything before the earliest match (+ the match if included).
//
// Matching: the earliest match position wins; at equal positions, the stop string listed first.
// A match is searched in the text not yet shown (which always holds any match's start). With
// can_stop false (fewer than min_tokens tokens so far, as vLLM) no match is taken and text that
// cannot be the start of a match is released.
//
// Usage:
//   StopChecker stop(params.stop, params.include_stop_str_in_output);
//   for each token: std::string shown = stop.add(detok.add(token), n_out >= params.min_tokens);
//                   emit(shown); if (stop.stopped()) { end the request; break; }
//   at the end (no stop): emit(stop.add(detok.finish())); emit(stop.finish());
// Cost: O(delta + held) * number of stop strings per add().
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm {

class StopChecker {
 public:
  StopChecker(std::vector<std::string> stop, bool include_stop_str_in_output);

  // Newly decoded text in; the text safe to show out (possibly empty). After stopped(): "".
  std::string add(std::string_view delta, bool can_stop = true);
  // The held-back tail, at the end of a request that did not stop (then "" until more add()).
  std::string finish();

  bool stopped() const { return stopped_; }
  // The stop string that matched (when stopped()).
  const std::string& matched() const { return matched_; }
  bool empty() const { return stop_.empty(); }

 private:
  std::vector<std::string> stop_;
  bool include_;
  std::string pending_;  // decoded, not shown yet
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace nanovllm
