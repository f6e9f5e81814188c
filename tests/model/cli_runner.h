#pragma once
// Runs the built `nanovllm` binary (NANOVLLM_BINARY_DIR) with arguments: exit status, stdout and
// stderr apart.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "reference/test_util.h"

namespace nanovllm::test {

struct CliResult {
  int status;
  std::string out, err;  // stdout, stderr
};

inline CliResult nanovllm(const std::string& args) {
  const std::filesystem::path err_file = std::filesystem::temp_directory_path() / ("nanovllm-cli-err-" + std::to_string(::getpid()));
  const std::string cmd = test::binary_dir() + "/nanovllm " + args + " 2>" + err_file.string() + " < /dev/null";
  CliResult r{-1, "", ""};
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  std::filesystem::remove(err_file);
  return r;
}

}  // namespace nanovllm::test
