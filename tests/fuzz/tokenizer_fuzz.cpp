// libFuzzer target for the tokenizer.json loader: any byte string must either load or throw
// nanovllm::Error; a loaded tokenizer must then encode and decode without crashing (encode may
// throw Error only for invalid UTF-8, which the sample text is not), and decode(encode(text))
// must give back valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "util/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<nanovllm::Tokenizer> tok;
  try {
    tok.emplace(nanovllm::Tokenizer::from_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz"));
  } catch (const nanovllm::Error&) {
    return 0;
  }
  static const std::string kSample = "Hello world! 123 <|im_start|>user\n\xc3\xa9t\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80  x";
  for (bool special : {true, false}) {
    const std::vector<int32_t> ids = tok->encode(kSample, special);
    for (int32_t id : ids)
      if (id < 0 || id >= tok->vocab_size()) __builtin_trap();
    for (bool skip : {false, true}) (void)tok->decode(ids, skip);
  }
  std::vector<int32_t> all;
  for (int32_t id = -2; id < tok->vocab_size() && id < 600; ++id) all.push_back(id);
  (void)tok->decode(all, false);
  for (int32_t id : all) (void)tok->id_to_token(id);
  return 0;
}
