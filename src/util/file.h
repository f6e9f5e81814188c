#pragma once
#include <string>

namespace nanovllm {

// The whole file as bytes. Throws Error "<path>: cannot open: <reason>" or "<path>: read failed".
std::string read_file(const std::string& path);

}  // namespace nanovllm
