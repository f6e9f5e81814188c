// StopChecker: stop strings over streamed text deltas, split anywhere; streamed text never shows a
// stop string or part of one; include_stop_str_in_output; min_tokens (can_stop false).
#include "engine/stop_checker.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace nanovllm {
namespace {

struct Fed {
  std::string shown;                 // everything released, concatenated
  std::vector<std::string> pieces;   // each release
  bool stopped = false;
  std::string matched;
};

Fed feed(const std::vector<std::string>& stop, bool include, const std::vector<std::string>& deltas) {
  StopChecker c(stop, include);
  Fed r;
  for (const std::string& d : deltas) {
    std::string out = c.add(d);
    r.pieces.push_back(out);
    r.shown += out;
    if (c.stopped()) break;
  }
  if (!c.stopped()) r.shown += c.finish();
  r.stopped = c.stopped();
  r.matched = c.matched();
  return r;
}

TEST(StopChecker, MatchSplitAcrossDeltas) {
  Fed r = feed({"STOP"}, false, {"hello S", "T", "O", "P and more"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.matched, "STOP");
  EXPECT_EQ(r.shown, "hello ");
  EXPECT_EQ(r.pieces[0], "hello ") << "the partial 'S' is held back";
  EXPECT_EQ(r.pieces[1], "");
  EXPECT_EQ(r.pieces[2], "");
}

TEST(StopChecker, IncludeStopString) {
  Fed r = feed({"</end>"}, true, {"abc</e", "nd>xyz"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.shown, "abc</end>");
}

TEST(StopChecker, FalseStartIsReleased) {
  Fed r = feed({"STOP"}, false, {"ST", "OR", "E"});
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.shown, "STORE");
  EXPECT_EQ(r.pieces[0], "") << "'ST' may start STOP";
  EXPECT_EQ(r.pieces[1], "STOR");
}

TEST(StopChecker, EarliestMatchWinsThenListOrder) {
  EXPECT_EQ(feed({"world", "lo"}, false, {"hello world"}).shown, "hel");
  Fed r = feed({"ab", "abc"}, true, {"xxabcd"});
  EXPECT_EQ(r.matched, "ab");
  EXPECT_EQ(r.shown, "xxab");
}

TEST(StopChecker, HeldTailReleasedAtFinish) {
  Fed r = feed({"\n\n"}, false, {"line\n"});
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.pieces[0], "line");
  EXPECT_EQ(r.shown, "line\n");
}

TEST(StopChecker, NoStopStringsPassThrough) {
  StopChecker c({}, false);
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(c.add("abc"), "abc");
  EXPECT_EQ(c.finish(), "");
}

TEST(StopChecker, CanStopFalseTakesNoMatch) {
  StopChecker c({"x"}, false);
  EXPECT_EQ(c.add("axb", /*can_stop=*/false), "axb");
  EXPECT_FALSE(c.stopped());
  EXPECT_EQ(c.add("cxd"), "c");
  EXPECT_TRUE(c.stopped());
  EXPECT_EQ(c.add("more"), "") << "nothing after the stop";
}

TEST(StopChecker, MultiByteUtf8) {
  Fed r = feed({"世界"}, false, {"你好", "世", "界!"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.shown, "你好");
}

// Random texts cut into random deltas: the released text is the text before the first match
// (+ the match), and no released piece ever ends inside what becomes a match.
TEST(StopChecker, RandomSplitsAgreeWithWholeText) {
  std::mt19937 rng(1);
  const std::vector<std::string> stops = {"aab", "ba", "ccc"};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    for (int i = 0, n = int(rng() % 30); i < n; ++i) text += "abc"[rng() % 3];
    const bool include = trial % 2;
    // Expected: earliest match over the whole text, ties in list order.
    size_t best = std::string::npos;
    std::string hit;
    for (const std::string& s : stops) {
      size_t at = text.find(s);
      if (at < best) best = at, hit = s;
    }
    const std::string want = best == std::string::npos ? text : text.substr(0, best + (include ? hit.size() : 0));
    std::vector<std::string> deltas;
    for (size_t i = 0; i < text.size();) {
      size_t len = 1 + rng() % 4;
      deltas.push_back(text.substr(i, len));
      i += len;
    }
    Fed r = feed(stops, include, deltas);
    ASSERT_EQ(r.shown, want) << "text '" << text << "'";
    ASSERT_EQ(r.stopped, best != std::string::npos);
    // Streamed prefix never contains a stop string unless included at the very end.
    std::string so_far;
    for (const std::string& p : r.pieces) {
      so_far += p;
      for (const std::string& s : stops) {
        size_t at = so_far.find(s);
        if (at != std::string::npos) {
          ASSERT_TRUE(include && at + s.size() == so_far.size()) << so_far;
        }
      }
    }
  }
}

}  // namespace
}  // namespace nanovllm
