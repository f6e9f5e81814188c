#pragma once
// Strict parsers for numbers given on the command line (the whole text must be the number).
//
// parse_size: a byte count, "4096", "512K", "512M", "4G", "1.5G", "4GiB", "4GB". K, M, G, T
// (and KiB, MiB, GiB, TiB) are powers of 1024; KB, MB, GB, TB powers of 1000; "B" or no suffix
// is bytes. Letters are case-insensitive; spaces around the number and between it and the
// suffix are allowed. A fraction rounds down to whole bytes. Error (naming `what` and the text)
// for anything else: empty, negative, junk, an unknown suffix, or more than INT64_MAX bytes.
#include <cstdint>
#include <string>
#include <string_view>

namespace nanovllm {

int64_t parse_size(std::string_view text, std::string_view what = "size");
// A byte count as parse_size reads it back: the largest exact binary unit ("512MiB", "4GiB",
// "1000"), so parse_size(format_size(n)) == n for every n >= 0.
std::string format_size(int64_t bytes);

// A decimal integer in [min, max] ("-12", "+7"; no suffix, no fraction). Error otherwise.
int64_t parse_int(std::string_view text, int64_t min, int64_t max, std::string_view what = "number");

}  // namespace nanovllm
