#pragma once
// UTF-8 helpers for the tokenizer: strict decoding of input text, and the lossy decoding
// Hugging Face applies to decoded bytes (Rust's String::from_utf8_lossy: every maximal
// invalid subpart becomes one U+FFFD, as the Unicode standard recommends).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace nanovllm::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;

// Appends the UTF-8 encoding of `cp` (any value up to 0x10FFFF, surrogates included).
void append(std::string& out, char32_t cp);

// Decodes the code point at s[pos] of VALID UTF-8 and advances pos past it.
char32_t next(std::string_view s, size_t& pos);

// Byte offset of the first invalid UTF-8 sequence in s, or npos when s is valid UTF-8
// (overlong forms, surrogates and values past U+10FFFF are invalid).
size_t find_invalid(std::string_view s);

// Appends the lossy decoding of `bytes` to out and returns how many bytes it consumed.
// With `final_chunk` every byte is consumed (a truncated sequence at the end becomes one
// U+FFFD). Without it, a trailing sequence that is a valid but incomplete prefix of a
// character is left unconsumed: more bytes may complete it. Everything consumed decodes
// exactly as it would inside any longer input that starts with `bytes`.
size_t append_lossy(std::string& out, std::string_view bytes, bool final_chunk);

}  // namespace nanovllm::utf8
