#include "server/json_decoder.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "server/api_error.h"

namespace nanovllm::server {

namespace {

using Json = nlohmann::ordered_json;

// nlohmann's SAX interface, building the tree under JsonLimits. An object's members are collected
// in a plain vector (duplicates included) and moved into the ordered_map when the object closes,
// after duplicates are resolved by sorting: O(k log k) for k keys, whatever the keys are (a hash
// index could be flooded with colliding keys).
class BoundedBuilder {
 public:
  BoundedBuilder(Json& root, const JsonLimits& limits) : root_(root), limits_(limits) {}

  bool null() { return add(Json(nullptr)); }
  bool boolean(bool v) { return add(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return add(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return add(Json(v)); }
  bool number_float(Json::number_float_t v, const Json::string_t&) { return add(Json(v)); }
  bool string(Json::string_t& s) {
    check_string(s);
    return add(Json(std::move(s)));
  }
  bool binary(Json::binary_t&) { return add(Json(nullptr)); }  // JSON text has no binary values

  bool start_object(std::size_t) {
    add(Json::object());
    open(true);
    return true;
  }
  bool key(Json::string_t& k) {
    Frame& f = frames_.back();
    if (frames_.size() == 1) top_key_.clear();  // an error in the body itself names no field
    if (++f.count > limits_.max_object_keys) {
      refuse("an object has more than {} keys (the server's limit on keys per object)", limits_.max_object_keys);
    }
    check_string(k);
    if (frames_.size() == 1) top_key_ = k;
    f.members.emplace_back(std::move(k), Json());
    return true;
  }
  bool end_object() {
    Frame& f = frames_.back();
    Json::object_t& obj = f.value->get_ref<Json::object_t&>();
    std::vector<std::pair<std::string, Json>>& m = f.members;
    std::vector<char> dropped = duplicates(m);
    obj.reserve(m.size());
    auto& members = static_cast<Json::object_t::Container&>(obj);  // append: no linear key search
    for (size_t i = 0; i < m.size(); ++i) {
      if (!dropped[i]) members.emplace_back(std::move(m[i].first), std::move(m[i].second));
    }
    frames_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    add(Json::array());
    open(false);
    return true;
  }
  bool end_array() {
    frames_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error ...": keep
    // what follows the prefix.
    if (size_t at = what.find("] "); at != std::string::npos) what = what.substr(at + 2);
    bad_request(top_key_, "the body is not valid JSON (UTF-8): {}", what);
  }

 private:
  struct Frame {
    Json* value;                                       // the array or object being filled
    bool is_object;
    int64_t count = 0;                                 // elements or keys so far
    std::vector<std::pair<std::string, Json>> members;  // object: in order, duplicates included
  };

  template <typename... Args>
  [[noreturn]] void refuse(fmt::format_string<Args...> f, Args&&... args) {
    std::string where = top_key_.empty() ? "" : fmt::format(" (in '{}')", top_key_);
    bad_request(top_key_, "{}{}", fmt::format(f, std::forward<Args>(args)...), where);
  }

  void check_string(const std::string& s) {
    if (int64_t(s.size()) > limits_.max_string_bytes) {
      refuse("a string is longer than {} bytes (the server's limit on string length)", limits_.max_string_bytes);
    }
  }

  void open(bool is_object) {
    if (int(frames_.size()) >= limits_.max_depth) {
      refuse("arrays and objects nest deeper than {} levels (the server's limit on JSON depth)", limits_.max_depth);
    }
    frames_.push_back(Frame{last_, is_object, 0, {}});
  }

  // Places v in the open container (or at the root); last_ points at it.
  bool add(Json v) {
    if (++num_values_ > limits_.max_values) {
      refuse("the body holds more than {} JSON values (the server's limit)", limits_.max_values);
    }
    if (frames_.empty()) {
      root_ = std::move(v);
      last_ = &root_;
      return true;
    }
    Frame& f = frames_.back();
    if (f.is_object) {
      f.members.back().second = std::move(v);
      last_ = &f.members.back().second;
      return true;
    }
    if (++f.count > limits_.max_array_length) {
      refuse("an array has more than {} elements (the server's limit on array length)", limits_.max_array_length);
    }
    Json::array_t& a = f.value->get_ref<Json::array_t&>();
    a.push_back(std::move(v));
    last_ = &a.back();
    return true;
  }

  // Which members to drop: of equal keys the first keeps its place and takes the last value.
  static std::vector<char> duplicates(std::vector<std::pair<std::string, Json>>& m) {
    std::vector<char> dropped(m.size(), 0);
    if (m.size() < 2) return dropped;
    std::vector<uint32_t> order(m.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return m[a].first < m[b].first; });
    for (size_t i = 0; i < order.size();) {
      size_t j = i + 1;
      while (j < order.size() && m[order[j]].first == m[order[i]].first) ++j;
      if (j - i > 1) {  // order[i] is the first occurrence, order[j - 1] the last
        m[order[i]].second = std::move(m[order[j - 1]].second);
        for (size_t k = i + 1; k < j; ++k) dropped[order[k]] = 1;
      }
      i = j;
    }
    return dropped;
  }

  Json& root_;
  const JsonLimits& limits_;
  std::vector<Frame> frames_;
  Json* last_ = nullptr;
  int64_t num_values_ = 0;
  std::string top_key_;  // the top-level key being read (the param of an error)
};

}  // namespace

Json decode_json(std::string_view text, const JsonLimits& limits) {
  if (text.empty()) bad_request("", "the body is not valid JSON (UTF-8): it is empty");
  Json root;
  BoundedBuilder builder(root, limits);
  Json::sax_parse(text, &builder);  // errors throw from the builder
  return root;
}

}  // namespace nanovllm::server
