#pragma once
// Safetensors: a validating reader (mmap) and a writer. The reader checks what the reference
// implementation checks: 8-byte header length within bounds (and within the file), UTF-8 JSON
// object, known dtype, shape x dtype size == byte range, ranges inside the data section, no
// overlaps or gaps, no duplicate names, no trailing bytes. Every error names the file (and the
// tensor where there is one); nothing is allocated beyond the file's size because a header said so.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace nanovllm {

struct SafetensorsTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapped file
  size_t nbytes = 0;
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps and validates the file. Throws Error.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  // Validates a whole file image held in memory (fuzzing, tests). `bytes` must outlive the result.
  static std::unique_ptr<SafetensorsFile> parse(const uint8_t* bytes, size_t size,
                                                const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;  // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a model folder: model.safetensors, or model-*.safetensors listed by
// model.safetensors.index.json (its weight_map must name existing files, and each tensor must be
// in the file the index says). Throws Error.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& folder);
  const SafetensorsTensor* find(const std::string& name) const;  // nullptr if absent
  std::vector<std::string> names() const;
  // The tensor, checked to have exactly `shape`; Error names the file and tensor otherwise.
  const SafetensorsTensor& get(const std::string& name, const std::vector<int64_t>& shape) const;
  std::string file_of(const std::string& name) const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsTensor*> tensors_;
  std::map<std::string, std::string> file_of_;
  std::string folder_;
};

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // numel * dtype size
};
// Writes a safetensors file (tensors laid out in the given order, 8-byte aligned header).
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A tensor's name, dtype and shape, without its bytes.
struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

// Streams a safetensors file whose tensors are known up front but whose bytes are produced one
// piece at a time (a 1.2 GB checkpoint is never held in memory). The constructor writes the
// header; write() appends data in spec order (a tensor may span several calls); finish() checks
// that exactly the announced number of bytes arrived and closes the file. A writer destroyed
// before finish() removes its partial file. Throws Error (naming the file) on I/O failure.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<TensorSpec> specs,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  void write(const void* data, size_t nbytes);
  void finish();
  size_t data_bytes() const { return total_; }  // the size of the data section

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  size_t total_ = 0;
  size_t written_ = 0;
};

}  // namespace nanovllm
