#pragma once
// NFC exactly as Hugging Face's NFC normalizer computes it.
#include <string>
#include <string_view>

namespace nanovllm {

// NFC of valid UTF-8: utf8proc's NFC (Unicode 15), except that code points HF's tables
// (Unicode 9.0) do not know are left alone as plain starters, as HF leaves them. Runs of
// characters NFC cannot change (most text: ASCII, CJK, Hangul syllables, precomposed
// letters) are copied without calling utf8proc.
std::string nfc(std::string_view s);

}  // namespace nanovllm
