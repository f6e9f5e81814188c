#pragma once
// Request bodies -> nlohmann::ordered_json in time and memory linear in the body, refusing what
// exceeds JsonLimits while it is read (a SAX pass builds the tree), before anything is built for it.
//
// Why not ordered_json::parse: its object inserts key by key with a linear search, so a body of
// many keys parses in quadratic time (80,000 keys: 24 s of one thread). Here keys are appended and
// duplicates found through a hash index; a duplicate key keeps its first position and takes the
// last value, as ordered_json::parse does. Key order is kept: tool-call arguments and JSON schemas
// are rendered into prompts in the order the client wrote them.
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

namespace nanovllm::server {

struct JsonLimits {
  int max_depth = 64;                  // nesting of arrays and objects
  int64_t max_object_keys = 4096;      // keys of one object
  int64_t max_array_length = 262144;   // elements of one array (a token-id prompt of 256 Ki ids)
  int64_t max_string_bytes = 1 << 20;  // one string or key
  int64_t max_values = 1 << 20;        // values in the whole body (containers and scalars)
};

// Parses `text` (UTF-8 JSON). Throws ApiError 400 naming the limit that was exceeded (and, as its
// param, the top-level field it was found in), or saying why the text is not JSON.
nlohmann::ordered_json decode_json(std::string_view text, const JsonLimits& limits);

}  // namespace nanovllm::server
