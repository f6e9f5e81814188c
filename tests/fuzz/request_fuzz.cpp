// libFuzzer target for the OpenAI request parser (src/server/openai_request.cpp): any byte string
// as a /v1/completions or /v1/chat/completions body must parse into checked SamplingParams or throw
// server::ApiError with a 4xx status and a message; never crash, hang or throw anything else.
// Not built by CMake. With clang (Debian: clang, libclang-rt-dev), from the repository root:
//   mkdir -p build/fuzz/request_corpus && clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined \
//     -Isrc -Iinclude tests/fuzz/request_fuzz.cpp src/server/openai_request.cpp -lfmt \
//     -o build/fuzz/request_fuzz && build/fuzz/request_fuzz -max_total_time=60 -max_len=4096 build/fuzz/request_corpus
// Seed the corpus with request bodies (e.g. those of tests/server/bad_requests_test.cpp).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  for (bool chat : {false, true}) {
    try {
      nanovllm::server::OpenAIRequest r = nanovllm::server::parse_openai_request(body, chat);
      // What parsed is in range.
      const auto& p = r.params;
      if (p.n < 1 || p.n > nanovllm::server::RequestLimits{}.max_n) __builtin_trap();
      if (r.max_tokens_given && p.max_tokens < 1) __builtin_trap();
      if (p.temperature && !(*p.temperature >= 0)) __builtin_trap();
      if (p.top_p && !(*p.top_p > 0 && *p.top_p <= 1)) __builtin_trap();
      if (p.logprobs && (*p.logprobs < 0 || *p.logprobs > 20)) __builtin_trap();
      if (chat ? r.messages.empty() : r.prompts.empty()) __builtin_trap();
    } catch (const nanovllm::server::ApiError& e) {
      if (e.status < 400 || e.status >= 500 || std::string_view(e.what()).empty()) __builtin_trap();
    }
  }
  return 0;
}
