#include "util/file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "util/check.h"

namespace nanovllm {

std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const bool error = std::ferror(f);
  std::fclose(f);
  if (error) fail("{}: read failed", path);
  return text;
}

}  // namespace nanovllm
