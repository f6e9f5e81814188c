// Checkpoint: every tensor of a model folder, from model.safetensors or from the shards that
// model.safetensors.index.json lists.
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "model/safetensors_internal.h"
#include "util/check.h"
#include "util/file.h"

namespace nanovllm {

using safetensors_detail::brief;
using safetensors_detail::json;
using safetensors_detail::shape_str;

namespace {

// A shard name from an index must be a plain file name inside the folder.
bool is_plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

}  // namespace

Checkpoint::Checkpoint(const std::string& folder) : folder_(folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) fail("{}: not a model folder (not a directory)", folder);
  const std::string single = (fs::path(folder) / "model.safetensors").string();
  const std::string index_path = (fs::path(folder) / "model.safetensors.index.json").string();

  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  if (fs::exists(index_path, ec)) {
    json index;
    try {
      std::string text = read_file(index_path);
      if (text.find('\0') != std::string::npos)
        fail("{}: not valid JSON: holds a NUL byte", index_path);
      index = json::parse(text);
    } catch (const json::exception& e) {
      fail("{}: not valid JSON: {}", index_path, e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      fail("{}: missing 'weight_map' object", index_path);
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string() || !is_plain_file_name(file.get<std::string>()))
        fail("{}: weight_map['{}'] is not a file name in the folder: {}", index_path, name,
             brief(file));
      weight_map[name] = file.get<std::string>();
    }
    if (weight_map.empty()) fail("{}: weight_map lists no tensors", index_path);
    std::set<std::string> shards;
    for (const auto& [name, file] : weight_map) {
      if (shards.count(file)) continue;
      const std::string shard_path = (fs::path(folder) / file).string();
      if (!fs::is_regular_file(shard_path, ec))
        fail("{}: weight_map['{}'] names {}, which does not exist", index_path, name, shard_path);
      shards.insert(file);
    }
    for (const std::string& file : shards)
      files_.push_back(SafetensorsFile::open((fs::path(folder) / file).string()));
  } else if (fs::exists(single, ec)) {
    files_.push_back(SafetensorsFile::open(single));
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json in the folder", folder);
  }

  for (const auto& file : files_) {
    for (const SafetensorsTensor& t : file->tensors()) {
      auto [it, inserted] = tensors_.emplace(t.name, &t);
      if (!inserted) fail("{}: tensor '{}' is also in {}", file->path(), t.name, file_of_[t.name]);
      file_of_[t.name] = file->path();
    }
  }
  for (const auto& [name, file] : weight_map) {
    const std::string shard_path = (fs::path(folder) / file).string();
    auto it = file_of_.find(name);
    if (it == file_of_.end() || it->second != shard_path)
      fail("{}: tensor '{}' is listed in {} but is not in that file{}", shard_path, name,
           index_path, it == file_of_.end() ? "" : fmt::format(" (it is in {})", it->second));
  }
}

const SafetensorsTensor* Checkpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

const SafetensorsTensor& Checkpoint::get(const std::string& name,
                                         const std::vector<int64_t>& shape) const {
  const SafetensorsTensor* t = find(name);
  if (!t) {
    std::vector<std::string> files;
    for (const auto& f : files_) files.push_back(std::filesystem::path(f->path()).filename());
    fail("{}: tensor '{}' not found (files: {})", folder_, name, fmt::join(files, ", "));
  }
  if (t->shape != shape)
    fail("{}: tensor '{}' has shape {}, expected {}", file_of(name), name, shape_str(t->shape),
         shape_str(shape));
  return *t;
}

std::string Checkpoint::file_of(const std::string& name) const {
  auto it = file_of_.find(name);
  return it == file_of_.end() ? std::string() : it->second;
}

}  // namespace nanovllm
