#include "util/progress_bar.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace nanovllm {
namespace {

TEST(ProgressBar, FormatsLikeTqdm) {
  std::string line = ProgressBar::format("Generating", 95, 256, 12.0, "Prefill=1234tok/s, Decode=567tok/s");
  EXPECT_NE(line.find("Generating:  37%|"), std::string::npos) << line;
  EXPECT_NE(line.find("| 95/256 [00:12<00:20, Prefill=1234tok/s, Decode=567tok/s]"), std::string::npos) << line;
  EXPECT_EQ(ProgressBar::format_interval(3725), "1:02:05");
  EXPECT_EQ(ProgressBar::format_interval(65), "01:05");
}

TEST(ProgressBar, SilentWhenDisabledOrNotATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar(10, "Generating", /*enabled=*/true, f);  // a file is not a terminal
    EXPECT_FALSE(bar.active());
    bar.update(3, 100, 0);
    EXPECT_EQ(bar.n(), 3);
    bar.close();
  }
  EXPECT_EQ(std::ftell(f), 0);
  std::fclose(f);
}

}  // namespace
}  // namespace nanovllm
