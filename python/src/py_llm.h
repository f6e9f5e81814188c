#pragma once
// PyLLM: the engine as nanovllm._C.LLM. generate() runs LLM::generate and streams run on an
// AsyncLLMEngine, both with the GIL released; the waiting thread takes the GIL back only briefly
// (at least every 100 ms): to check for Ctrl-C (PyErr_CheckSignals; the call's unfinished
// requests are then aborted and KeyboardInterrupt propagates) and to report progress. One LLM
// may be shared by Python threads: generate calls run one after another.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/async_llm_engine.h"
#include "nanovllm/llm.h"

namespace nanovllm::python {

namespace py = pybind11;

// One request's events as a Python iterator of dicts (token ids and text since the previous
// item; finish_reason on the last one). Dropping it unfinished aborts the request.
class PyStream {
 public:
  PyStream(AsyncLLMEngine& engine, std::shared_ptr<RequestStream> stream);
  ~PyStream();
  py::dict next();  // py::stop_iteration after the final event
  void close();     // abort the request unless it finished
  int64_t request_id() const { return stream_->request_id(); }

 private:
  AsyncLLMEngine& engine_;
  std::shared_ptr<RequestStream> stream_;
  bool done_ = false;
};

class PyLLM {
 public:
  explicit PyLLM(const Config& config);  // loads the model with the GIL released
  ~PyLLM();

  // LLM::generate with the GIL released: one dict per prompt ({"text", "token_ids",
  // "finish_reason"}, plus "error", "stop_reason", "logprobs" and "samples" (n > 1) when they
  // have content), in order. progress, if not None, is called on this thread as
  // progress(num_newly_finished, prefill_tok_per_s, decode_tok_per_s). Ctrl-C aborts the call's
  // requests and raises KeyboardInterrupt. Refused (RuntimeError) while a stream is running.
  py::list generate(const std::vector<std::vector<int32_t>>& prompts,
                    const std::vector<SamplingParams>& params, const py::object& progress);
  // One request on the streaming engine (its own thread, started on first use).
  std::unique_ptr<PyStream> stream(std::vector<int32_t> prompt, const SamplingParams& params);

  // The model's chat template (or template_source, when not empty, with the model's bos/eos
  // tokens); messages, tools and kwargs as JSON text.
  std::string apply_chat_template(const std::string& messages_json, const std::string& tools_json,
                                  bool add_generation_prompt, const std::string& kwargs_json,
                                  const std::string& template_source) const;
  const Tokenizer* tokenizer() const { return llm_->engine().tokenizer(); }
  LLMEngine& engine() { return llm_->engine(); }

 private:
  // Takes busy_ (one generate or stream start at a time), waiting with the GIL released and
  // giving up with the Python error set when Ctrl-C comes first.
  std::unique_lock<std::timed_mutex> lock_engine();

  std::unique_ptr<LLM> llm_;
  std::timed_mutex busy_;
  std::unique_ptr<AsyncLLMEngine> async_;  // streams; idle (and unused) while generate runs
};

}  // namespace nanovllm::python
