// The CLI's number parsers (src/util/parse_size.h): the accepted forms, their values, and an
// Error naming the flag and the text for everything else.
#include "util/parse_size.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "util/check.h"

namespace nanovllm {
namespace {

TEST(ParseSize, UnitsAndForms) {
  EXPECT_EQ(parse_size("0"), 0);
  EXPECT_EQ(parse_size("4096"), 4096);
  EXPECT_EQ(parse_size("4096B"), 4096);
  EXPECT_EQ(parse_size("512K"), 512 * 1024);
  EXPECT_EQ(parse_size("512M"), int64_t{512} << 20);
  EXPECT_EQ(parse_size("512m"), int64_t{512} << 20);
  EXPECT_EQ(parse_size("4G"), int64_t{4} << 30);
  EXPECT_EQ(parse_size("4GiB"), int64_t{4} << 30);
  EXPECT_EQ(parse_size("4gib"), int64_t{4} << 30);
  EXPECT_EQ(parse_size("4GB"), int64_t{4'000'000'000});
  EXPECT_EQ(parse_size("2T"), int64_t{2} << 40);
  EXPECT_EQ(parse_size(" 1 G "), int64_t{1} << 30);
  EXPECT_EQ(parse_size("1.5G"), int64_t{3} << 29);
  EXPECT_EQ(parse_size(".5K"), 512);
  EXPECT_EQ(parse_size("1.0009765625K"), 1025);  // exact fractions stay exact
  EXPECT_EQ(parse_size("0.3"), 0);               // rounds down to whole bytes
  EXPECT_EQ(parse_size("9223372036854775807"), std::numeric_limits<int64_t>::max());
}

TEST(ParseSize, ErrorsNameTheFlagAndTheText) {
  for (const char* bad : {"", " ", "-1", "1X", "1GiBs", "G", "1..5G", "1e9", "0x10", "9223372036854775808",
                          "8E", "16384P", "9000000000G", "1 2"}) {
    try {
      parse_size(bad, "--kv-cache-memory");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--kv-cache-memory: '" + std::string(bad) + "' is not a size"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(ParseSize, FormatReadsBack) {
  EXPECT_EQ(format_size(0), "0");
  EXPECT_EQ(format_size(1000), "1000");
  EXPECT_EQ(format_size(1024), "1KiB");
  EXPECT_EQ(format_size(int64_t{512} << 20), "512MiB");
  EXPECT_EQ(format_size(int64_t{3} << 30), "3GiB");
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1023}, int64_t{1} << 40, (int64_t{1} << 40) + 1,
                    std::numeric_limits<int64_t>::max()})
    EXPECT_EQ(parse_size(format_size(n)), n) << n;
}

TEST(ParseInt, RangeAndForms) {
  EXPECT_EQ(parse_int("42", 0, 100), 42);
  EXPECT_EQ(parse_int("-7", -10, 10), -7);
  EXPECT_EQ(parse_int("+7", -10, 10), 7);
  EXPECT_EQ(parse_int("-9223372036854775808", std::numeric_limits<int64_t>::min(), 0),
            std::numeric_limits<int64_t>::min());
  EXPECT_THROW(parse_int("101", 0, 100), Error);
  EXPECT_THROW(parse_int("9223372036854775808", 0, std::numeric_limits<int64_t>::max()), Error);
  EXPECT_THROW(parse_int("1.5", 0, 100), Error);
  EXPECT_THROW(parse_int("", 0, 100), Error);
  EXPECT_THROW(parse_int("-", 0, 100), Error);
  EXPECT_THROW(parse_int("5K", 0, 100000), Error);
}

}  // namespace
}  // namespace nanovllm
