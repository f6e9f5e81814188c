#pragma once
// The chat page served at GET /: src/server/chat_page.html, compiled into the binary (CMake
// wraps the file in a raw string literal at configure time; nothing is read at run time).
#include <string_view>

namespace nanovllm::server {

// The whole HTML document (UTF-8, inline CSS and JS); serve as "text/html; charset=utf-8".
std::string_view chat_page_html();

}  // namespace nanovllm::server
