// Qwen3's <think> and <tool_call> output parsers, and the forced tool_choice stream: whole-text
// rules and streaming in every split.
#include <gtest/gtest.h>

#include "server/forced_tool_stream.h"
#include "server/reasoning_parser.h"
#include "server/tool_parser.h"

namespace nanovllm::server {
namespace {

TEST(ReasoningParser, WholeText) {
  auto r = ReasoningParser::parse("<think>\nplan it\n</think>\n\nThe answer.");
  EXPECT_EQ(r.reasoning, "\nplan it\n");
  EXPECT_EQ(r.content, "\n\nThe answer.");
  r = ReasoningParser::parse("No thinking here </think> at all");
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "No thinking here </think> at all");
  r = ReasoningParser::parse("<think>unfinished");
  EXPECT_EQ(r.reasoning, "unfinished");
  EXPECT_EQ(r.content, "");
  r = ReasoningParser::parse("opened by the prompt</think>after", /*starts_in_reasoning=*/true);
  EXPECT_EQ(r.reasoning, "opened by the prompt");
  EXPECT_EQ(r.content, "after");
  r = ReasoningParser::parse("<thin");
  EXPECT_EQ(r.content, "<thin");
}

TEST(ReasoningParser, EverySplitStreamsTheSame) {
  for (std::string text : {"<think>a</think>b", "  <think>xy</thi", "<thinking>", "plain <think>x", "<think></think>"}) {
    ReasoningDelta whole = ReasoningParser::parse(text);
    for (size_t cut1 = 0; cut1 <= text.size(); ++cut1) {
      for (size_t cut2 = cut1; cut2 <= text.size(); ++cut2) {
        ReasoningParser p;
        ReasoningDelta got;
        for (auto piece : {text.substr(0, cut1), text.substr(cut1, cut2 - cut1), text.substr(cut2)}) {
          ReasoningDelta d = p.add(piece);
          got.reasoning += d.reasoning;
          got.content += d.content;
        }
        ReasoningDelta d = p.finish();
        EXPECT_EQ(got.reasoning + d.reasoning, whole.reasoning) << text << " " << cut1 << " " << cut2;
        EXPECT_EQ(got.content + d.content, whole.content) << text << " " << cut1 << " " << cut2;
      }
    }
  }
}

TEST(ReasoningParser, ContentIsNotHeldBack) {
  ReasoningParser p;
  EXPECT_EQ(p.add("Hello").content, "Hello");
  ReasoningParser q;
  EXPECT_EQ(q.add("<think>abc</th").reasoning, "abc");
}

TEST(ToolParser, WholeText) {
  ToolDelta d = ToolParser::parse(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"now\"}\n</tool_call>", "call_7_");
  EXPECT_EQ(d.content, "Let me check.\n");
  ASSERT_EQ(d.calls.size(), 2u);
  EXPECT_EQ(d.calls[0].name, "get_weather");
  EXPECT_EQ(d.calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(d.calls[0].id, "call_7_0");
  EXPECT_EQ(d.calls[1].name, "now");
  EXPECT_EQ(d.calls[1].arguments, "{}");
  EXPECT_EQ(d.calls[1].id, "call_7_1");
}

TEST(ToolParser, MalformedCallsStayText) {
  EXPECT_EQ(ToolParser::parse("a<tool_call>{not json}</tool_call>").content, "a<tool_call>{not json}</tool_call>");
  EXPECT_EQ(ToolParser::parse("a<tool_call>{\"name\": 3}</tool_call>").calls.size(), 0u);
  EXPECT_EQ(ToolParser::parse("b<tool_call>{\"name\": \"f\"").content, "b<tool_call>{\"name\": \"f\"");
  EXPECT_EQ(ToolParser::parse("x <tool_cal").content, "x <tool_cal");
}

TEST(ToolParser, EverySplitStreamsTheSame) {
  const std::string text = "Hi<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1]}}</tool_call>tail";
  ToolDelta whole = ToolParser::parse(text);
  ASSERT_EQ(whole.calls.size(), 1u);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ToolParser p;
    ToolDelta a = p.add(text.substr(0, cut)), b = p.add(text.substr(cut)), c = p.finish();
    EXPECT_EQ(a.content + b.content + c.content, whole.content) << cut;
    EXPECT_EQ(a.calls.size() + b.calls.size() + c.calls.size(), 1u) << cut;
    EXPECT_TRUE(p.has_calls());
  }
}

// tool_choice "required": each {"name", "parameters"} item becomes one call when its object
// closes, whatever the split; braces and quotes inside strings do not confuse it; an item without
// a name is no call.
TEST(ForcedToolStream, RequiredCallsInEverySplit) {
  const std::string text =
      R"([{"name": "get_weather", "parameters": {"city": "Pa{r}is \"x\" ]", "n": [1, {"a": 2}]}},)"
      R"( {"name": "get_time", "parameters": {}}, {"parameters": {}}])";
  const std::vector<std::pair<std::string, std::string>> want = {
      {"get_weather", R"({"city":"Pa{r}is \"x\" ]","n":[1,{"a":2}]})"}, {"get_time", "{}"}};
  for (size_t cut1 = 0; cut1 <= text.size(); ++cut1) {
    for (size_t cut2 = cut1; cut2 <= text.size(); cut2 += 7) {
      ForcedToolStream s("", "call_x_");
      std::vector<nlohmann::ordered_json> got;
      for (const std::string& piece : {text.substr(0, cut1), text.substr(cut1, cut2 - cut1), text.substr(cut2)})
        for (const auto& d : s.add(piece)) got.push_back(d);
      ASSERT_EQ(got.size(), want.size()) << "cuts " << cut1 << ", " << cut2;
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i]["index"], int(i));
        EXPECT_EQ(got[i]["id"], "call_x_" + std::to_string(i));
        EXPECT_EQ(got[i]["function"]["name"], want[i].first);
        EXPECT_EQ(got[i]["function"]["arguments"], want[i].second);
      }
    }
  }
}

// A named function: the first non-empty delta opens call 0 with its name; the arguments are the
// raw text, appended delta by delta.
TEST(ForcedToolStream, NamedFunctionStreamsItsArguments) {
  ForcedToolStream s("get_time", "call_y_");
  EXPECT_TRUE(s.add("").empty());
  auto first = s.add("{\"tz\"");
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0]["id"], "call_y_0");
  EXPECT_EQ(first[0]["function"]["name"], "get_time");
  EXPECT_EQ(first[0]["function"]["arguments"], "{\"tz\"");
  auto next = s.add(": \"UTC\"}");
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0]["index"], 0);
  EXPECT_FALSE(next[0].contains("id"));
  EXPECT_FALSE(next[0]["function"].contains("name"));
  EXPECT_EQ(next[0]["function"]["arguments"], ": \"UTC\"}");
  EXPECT_EQ(s.num_calls(), 1);
}

}  // namespace
}  // namespace nanovllm::server
