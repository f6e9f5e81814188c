#include "distributed/control.h"

#include <cstring>
#include <vector>

namespace nanovllm {

void broadcast_message(Communicator& comm, std::string& message, int root) {
  int64_t length = comm.rank() == root ? int64_t(message.size()) : 0;
  comm.broadcast(Tensor::contiguous(&length, DType::I64, {1}), root);
  if (length < 0) fail("broadcast_message: negative length {}", length);
  // The bytes travel as i32 words (the tensor dtypes have no byte type).
  std::vector<int32_t> words(size_t((length + 3) / 4), 0);
  if (comm.rank() == root && length > 0) std::memcpy(words.data(), message.data(), size_t(length));
  if (!words.empty()) {
    comm.broadcast(Tensor::contiguous(words.data(), DType::I32, {int64_t(words.size())}), root);
  }
  if (comm.rank() != root) message.assign(reinterpret_cast<const char*>(words.data()), size_t(length));
}

}  // namespace nanovllm
