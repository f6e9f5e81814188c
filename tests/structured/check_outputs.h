#pragma once
// Runs tests/structured/check_outputs.py (python3-jsonschema, re.fullmatch, an Earley recognizer)
// over constrained outputs, one JSON line each ({"kind", "spec", "output", ...}: see the script),
// and fails the calling test on any invalid output or when python could not check them all.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reference/test_util.h"

namespace nanovllm::test {

inline void check_with_python(const std::vector<nlohmann::json>& lines) {
  namespace fs = std::filesystem;
  const fs::path file = fs::temp_directory_path() /
                        ("nanovllm_structured_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream f(file);
    for (const nlohmann::json& l : lines) f << l.dump() << "\n";
  }
  const std::string cmd = "python3 '" + source_dir() + "/tests/structured/check_outputs.py' '" +
                          file.string() + "' 2>&1";
  std::string report;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr) << cmd;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) report.append(buf, n);
  const int status = pclose(p);
  fs::remove(file);
  ASSERT_NE(report.find("CHECKED " + std::to_string(lines.size())), std::string::npos)
      << "check_outputs.py did not run (python3 with jsonschema is needed: apt-get install "
         "python3-jsonschema): "
      << report;
  EXPECT_EQ(status, 0) << report;
}

}  // namespace nanovllm::test
