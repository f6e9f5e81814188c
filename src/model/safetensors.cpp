#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "model/safetensors_internal.h"
#include "util/check.h"

namespace nanovllm {

using safetensors_detail::brief;
using safetensors_detail::json;
using safetensors_detail::shape_str;

namespace {

// The reference implementation refuses headers above 100 MB; so do we (a header length is
// checked against this and against the file size before anything is allocated for it).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// A valid header nests 3 levels (object, entry, shape); serde_json, which the reference uses,
// stops at 128.
constexpr int kMaxJsonDepth = 128;

// Every dtype string the safetensors format defines. Those the engine has a DType for map to it;
// the others are valid safetensors but rejected by nanovllm with a message that says so.
struct DTypeName {
  const char* name;
  bool supported;
  DType dtype;
};
constexpr DTypeName kDTypes[] = {
    {"BF16", true, DType::BF16},    {"F16", true, DType::F16},      {"F32", true, DType::F32},
    {"I32", true, DType::I32},      {"I64", true, DType::I64},      {"F64", false, DType::F32},
    {"BOOL", false, DType::F32},    {"U8", false, DType::F32},      {"I8", false, DType::F32},
    {"I16", false, DType::F32},     {"U16", false, DType::F32},     {"U32", false, DType::F32},
    {"U64", false, DType::F32},     {"F8_E5M2", false, DType::F32}, {"F8_E4M3", true, DType::F8E4M3},
    {"F8_E8M0", false, DType::F32}, {"F6_E2M3", false, DType::F32}, {"F6_E3M2", false, DType::F32},
    {"F4", false, DType::F32},      {"C64", false, DType::F32},
};

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::F32:
      return "F32";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::F8E4M3:
      return "F8_E4M3";
  }
  return "?";
}

// Parses the header, rejecting duplicate keys in any object (nlohmann would keep the last one).
json parse_header(std::string_view text, const std::string& path) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::string duplicate;
  int depth = 0;
  auto on_event = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        [[fallthrough]];
      case json::parse_event_t::array_start:
        if (++depth > kMaxJsonDepth)
          fail("{}: header nests deeper than {} levels", path, kMaxJsonDepth);
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        [[fallthrough]];
      case json::parse_event_t::array_end:
        --depth;
        break;
      case json::parse_event_t::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        if (!keys.back().insert(k).second && duplicate.empty()) duplicate = k;
        break;
      }
      default:
        break;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text.begin(), text.end(), on_event);
  } catch (const json::exception& e) {
    fail("{}: header is not valid UTF-8 JSON: {}", path, e.what());
  }
  if (!duplicate.empty()) fail("{}: header has duplicate key '{}'", path, duplicate);
  return header;
}

uint64_t read_offset(const json& v, const std::string& path, const std::string& name) {
  if (!v.is_number_unsigned())
    fail("{}: tensor '{}': data_offsets must hold non-negative integers, got {}", path, name,
         brief(v));
  return v.get<uint64_t>();
}

struct Entry {
  SafetensorsTensor tensor;
  uint64_t begin = 0, end = 0;
};

Entry parse_entry(const std::string& name, const json& info, uint64_t data_size,
                  const std::string& path) {
  if (!info.is_object())
    fail("{}: tensor '{}': entry is not an object: {}", path, name, brief(info));
  Entry e;
  e.tensor.name = name;
  auto dtype_it = info.find("dtype");
  if (dtype_it == info.end()) fail("{}: tensor '{}': missing 'dtype'", path, name);
  if (!dtype_it->is_string()) fail("{}: tensor '{}': dtype is not a string", path, name);
  const std::string& dtype = dtype_it->get_ref<const std::string&>();
  const DTypeName* known = nullptr;
  for (const DTypeName& d : kDTypes)
    if (dtype == d.name) known = &d;
  if (!known) fail("{}: tensor '{}': unknown dtype '{}'", path, name, dtype);
  if (!known->supported)
    fail(
        "{}: tensor '{}': dtype {} is valid safetensors but not supported by nanovllm "
        "(supported: BF16, F16, F32, I32, I64, F8_E4M3)",
        path, name, dtype);
  e.tensor.dtype = known->dtype;

  auto shape_it = info.find("shape");
  if (shape_it == info.end()) fail("{}: tensor '{}': missing 'shape'", path, name);
  if (!shape_it->is_array()) fail("{}: tensor '{}': shape is not an array", path, name);
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& d : *shape_it) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX))
      fail("{}: tensor '{}': shape must hold non-negative integers, got {}", path, name, brief(d));
    uint64_t dim = d.get<uint64_t>();
    overflow |= __builtin_mul_overflow(numel, dim, &numel);
    e.tensor.shape.push_back(int64_t(dim));
  }
  uint64_t nbytes = 0;
  overflow |= __builtin_mul_overflow(numel, uint64_t(dtype_size(e.tensor.dtype)), &nbytes);
  if (overflow)
    fail("{}: tensor '{}': shape {} x {} overflows 64 bits", path, name, shape_str(e.tensor.shape),
         dtype);

  auto off_it = info.find("data_offsets");
  if (off_it == info.end()) fail("{}: tensor '{}': missing 'data_offsets'", path, name);
  if (!off_it->is_array() || off_it->size() != 2)
    fail("{}: tensor '{}': data_offsets must be [begin, end], got {}", path, name, brief(*off_it));
  e.begin = read_offset((*off_it)[0], path, name);
  e.end = read_offset((*off_it)[1], path, name);
  if (e.begin > e.end)
    fail("{}: tensor '{}': data_offsets [{}, {}] end before they begin", path, name, e.begin,
         e.end);
  if (e.end > data_size)
    fail("{}: tensor '{}': data_offsets [{}, {}] run past the data section ({} bytes)", path, name,
         e.begin, e.end, data_size);
  if (e.end - e.begin != nbytes)
    fail("{}: tensor '{}': shape {} x {} is {} bytes but data_offsets [{}, {}] span {}", path, name,
         shape_str(e.tensor.shape), dtype, nbytes, e.begin, e.end, e.end - e.begin);
  e.tensor.nbytes = size_t(nbytes);
  return e;
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::parse(const uint8_t* bytes, size_t size,
                                                        const std::string& path) {
  if (size < 8)
    fail("{}: not a safetensors file: {} bytes, less than the 8-byte header length", path, size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes)
    fail("{}: header length {} is larger than the limit of {} bytes", path, header_len,
         kMaxHeaderBytes);
  if (header_len > size - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes)", path, header_len, size);
  std::string_view text(reinterpret_cast<const char*>(bytes) + 8, size_t(header_len));
  if (text.empty() || text[0] != '{') fail("{}: header does not start with '{{'", path);
  // nlohmann's lexer takes a NUL byte for the end of input; JSON never holds a raw NUL.
  if (text.find('\0') != std::string_view::npos)
    fail("{}: header holds a NUL byte at offset {}", path, 8 + text.find('\0'));
  json header = parse_header(text, path);
  if (!header.is_object()) fail("{}: header is not a JSON object", path);

  const uint8_t* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) fail("{}: __metadata__ is not an object", path);
      for (const auto& [k, v] : info.items()) {
        if (!v.is_string())
          fail("{}: __metadata__ value of '{}' is not a string: {}", path, k, brief(v));
        file->metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(name, info, data_size, path));
  }

  // Sorted by offset, the byte ranges must tile the data section exactly: no gaps, no overlaps.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const std::string* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < expected)
      fail("{}: tensor '{}': data_offsets [{}, {}] overlap tensor '{}'", path, e.tensor.name,
           e.begin, e.end, *prev);
    if (e.begin > expected)
      fail("{}: tensor '{}': {} unused bytes before its data_offsets [{}, {}]", path, e.tensor.name,
           e.begin - expected, e.begin, e.end);
    expected = e.end;
    prev = &e.tensor.name;
  }
  if (expected != data_size)
    fail("{}: {} trailing bytes after the last tensor{} (data section {} bytes)", path,
         data_size - expected, prev ? fmt::format(" '{}'", *prev) : std::string(), data_size);

  file->tensors_.reserve(entries.size());
  for (Entry& e : entries) {
    e.tensor.data = data + e.begin;
    file->index_[e.tensor.name] = file->tensors_.size();
    file->tensors_.push_back(std::move(e.tensor));
  }
  return file;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  size_t size = size_t(st.st_size);
  if (size < 8) {  // mmap cannot map 0 bytes; parse() gives the error
    ::close(fd);
    uint8_t none[8] = {};
    parse(none, size, path);
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);
  if (map == MAP_FAILED) fail("{}: mmap failed: {}", path, std::strerror(map_errno));
  try {
    auto file = parse(static_cast<const uint8_t*>(map), size, path);
    file->map_ = map;
    file->map_size_ = size;
    return file;
  } catch (...) {
    ::munmap(map, size);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---------------------------------------------------------------------------------------------
// Writing

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<TensorSpec> specs,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  for (const TensorSpec& s : specs) {
    if (s.name == "__metadata__" || !names.insert(s.name).second)
      fail("{}: cannot write tensor '{}': duplicate or reserved name", path, s.name);
    uint64_t numel = 1;
    for (int64_t d : s.shape) {
      if (d < 0) fail("{}: cannot write tensor '{}': negative dimension", path, s.name);
      NV_CHECK(!__builtin_mul_overflow(numel, uint64_t(d), &numel));
    }
    size_t nbytes = size_t(numel) * dtype_size(s.dtype);
    header[s.name] = {{"dtype", safetensors_dtype_name(s.dtype)},
                      {"shape", s.shape},
                      {"data_offsets", {total_, total_ + nbytes}}};
    total_ += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) fail("{}: cannot create: {}", path, std::strerror(errno));
  if (std::fwrite(len, 1, 8, file_) != 8 ||
      std::fwrite(text.data(), 1, text.size(), file_) != text.size())
    fail("{}: write failed: {}", path, std::strerror(errno));
}

void SafetensorsWriter::write(const void* data, size_t nbytes) {
  NV_CHECK(file_, "{}: write after finish", path_);
  if (written_ + nbytes > total_)
    fail("{}: {} bytes of tensor data written, more than the {} the header announced", path_,
         written_ + nbytes, total_);
  if (nbytes && std::fwrite(data, 1, nbytes, file_) != nbytes)
    fail("{}: write failed: {}", path_, std::strerror(errno));
  written_ += nbytes;
}

void SafetensorsWriter::finish() {
  NV_CHECK(file_, "{}: finish twice", path_);
  if (written_ != total_)
    fail("{}: {} bytes of tensor data written, the header announced {}", path_, written_, total_);
  int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) fail("{}: write failed: {}", path_, std::strerror(errno));
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_) {
    std::fclose(file_);
    std::remove(path_.c_str());
  }
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const TensorToWrite& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  SafetensorsWriter writer(path, std::move(specs), metadata);
  for (const TensorToWrite& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    if (t.bytes.size() != size_t(numel) * dtype_size(t.dtype))
      fail("{}: cannot write tensor '{}': {} bytes given, shape {} x {} needs {}", path, t.name,
           t.bytes.size(), shape_str(t.shape), dtype_name(t.dtype),
           size_t(numel) * dtype_size(t.dtype));
    writer.write(t.bytes.data(), t.bytes.size());
  }
  writer.finish();
}

}  // namespace nanovllm
