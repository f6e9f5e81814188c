#include "py_llm.h"

#include <pybind11/stl.h>

#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/llm_engine.h"
#include "tokenizer/chat_template.h"
#include "util/check.h"

namespace nanovllm::python {

namespace {

using Clock = std::chrono::steady_clock;

// How often a waiting caller takes the GIL back to look for Ctrl-C (LLM::generate calls back at
// least every 100 ms).
constexpr auto kSignalPoll = std::chrono::milliseconds(50);

// Thrown through C++ frames when the Python side must take over (the Python error is saved).
struct Interrupted : std::exception {
  const char* what() const noexcept override { return "interrupted"; }
};

// With the GIL held: true (and the Python error set) when a signal handler raised, e.g. Ctrl-C's
// KeyboardInterrupt.
bool signal_raised() { return PyErr_CheckSignals() != 0; }

nlohmann::ordered_json parse_json(const std::string& text, const char* what) {
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", what, e.what());
  }
}

py::list logprobs_list(const std::vector<StepLogprobs>& steps) {
  py::list out;
  for (const StepLogprobs& s : steps) {
    py::dict d;
    d["token_id"] = s.sampled.token_id;
    d["logprob"] = s.sampled.logprob;
    d["rank"] = s.rank;
    py::list top;
    for (const Logprob& l : s.top) top.append(py::make_tuple(l.token_id, l.logprob));
    d["top_logprobs"] = top;
    out.append(d);
  }
  return out;
}

py::dict output_dict(const GenerationOutput& o) {
  py::dict d;
  d["text"] = py::str(o.text);
  d["token_ids"] = py::cast(o.token_ids);
  d["finish_reason"] = py::str(o.finish_reason);
  if (!o.error.empty()) d["error"] = py::str(o.error);
  if (!o.stop_reason.empty()) d["stop_reason"] = py::str(o.stop_reason);
  if (!o.logprobs.empty()) d["logprobs"] = logprobs_list(o.logprobs);
  if (!o.prompt_logprobs.empty()) {  // vLLM's shape: None for the first prompt token
    py::list prompt;
    prompt.append(py::none());
    for (const auto& item : logprobs_list(o.prompt_logprobs)) prompt.append(item);
    d["prompt_logprobs"] = prompt;
  }
  if (!o.samples.empty()) {
    py::list samples;
    for (const GenerationOutput& s : o.samples) samples.append(output_dict(s));
    d["samples"] = samples;
  }
  return d;
}

}  // namespace

PyStream::PyStream(AsyncLLMEngine& engine, std::shared_ptr<RequestStream> stream)
    : engine_(engine), stream_(std::move(stream)) {}

PyStream::~PyStream() { close(); }

void PyStream::close() {
  if (done_) return;
  done_ = true;
  if (stream_->finished()) return;
  engine_.abort(stream_->request_id());
  // The abort lands at the next step boundary: wait for it, so that the engine is idle again
  // when close() returns (LLM.generate refuses to run beside a stream).
  py::gil_scoped_release nogil;
  while (!stream_->finished()) stream_->next(kSignalPoll);
}

py::dict PyStream::next() {
  if (done_) throw py::stop_iteration();
  std::optional<RequestEvent> e;
  bool interrupted = false;
  {
    py::gil_scoped_release nogil;
    while (!(e = stream_->next(kSignalPoll))) {
      if (stream_->finished()) break;  // the final event was read already
      py::gil_scoped_acquire gil;
      if (signal_raised()) {
        interrupted = true;
        break;
      }
    }
  }
  if (interrupted) {
    close();
    throw py::error_already_set();  // the KeyboardInterrupt set by PyErr_CheckSignals
  }
  if (!e) {
    done_ = true;
    throw py::stop_iteration();
  }
  if (e->finished) done_ = true;
  py::dict d;
  d["text"] = py::str(e->text);
  d["token_ids"] = py::cast(e->token_ids);
  d["index"] = e->index;  // the sample (n > 1) this event belongs to
  d["finished"] = e->finished;  // the last event of the stream (every sample ended)
  // The sample's finish reason, on the event that ends it.
  d["finish_reason"] = !e->finish_reason.empty() ? py::object(py::str(e->finish_reason)) : py::object(py::none());
  if (!e->error.empty()) d["error"] = py::str(e->error);
  if (!e->stop_reason.empty()) d["stop_reason"] = py::str(e->stop_reason);
  if (!e->logprobs.empty()) d["logprobs"] = logprobs_list(e->logprobs);
  d["num_prompt_tokens"] = e->num_prompt_tokens;
  d["num_completion_tokens"] = e->num_completion_tokens;
  return d;
}

PyLLM::PyLLM(const Config& config) {
  py::gil_scoped_release nogil;
  llm_ = std::make_unique<LLM>(config);
}

PyLLM::~PyLLM() {
  py::gil_scoped_release nogil;  // joining the stream engine's thread may wait for a step
  async_.reset();
  llm_.reset();
}

std::unique_lock<std::timed_mutex> PyLLM::lock_engine() {
  std::unique_lock lock(busy_, std::defer_lock);
  py::gil_scoped_release nogil;
  while (!lock.try_lock_for(kSignalPoll)) {
    py::gil_scoped_acquire gil;
    if (signal_raised()) throw Interrupted();
  }
  return lock;
}

py::list PyLLM::generate(const std::vector<std::vector<int32_t>>& prompts,
                         const std::vector<SamplingParams>& params, const py::object& progress) {
  std::unique_lock<std::timed_mutex> lock;
  try {
    lock = lock_engine();
  } catch (const Interrupted&) {
    throw py::error_already_set();
  }
  if (async_ && async_->num_unfinished() > 0) {
    throw std::runtime_error(fmt::format(
        "generate: {} streamed request(s) of this LLM are still running; read them to the end "
        "or close() them first", async_->num_unfinished()));
  }
  std::optional<py::error_already_set> error;  // Ctrl-C, or an exception of `progress`
  GenerateProgress seen;
  double prefill_rate = 0, decode_rate = 0;
  // On this thread, without the GIL, after steps and at least every 100 ms.
  ProgressCallback on_progress = [&](const GenerateProgress& p) {
    const bool changed = p.num_finished != seen.num_finished || p.num_steps != seen.num_steps;
    if (p.prefill_seconds > seen.prefill_seconds) {
      prefill_rate = double(p.num_prefill_tokens - seen.num_prefill_tokens) /
                     (p.prefill_seconds - seen.prefill_seconds);
    }
    if (p.decode_seconds > seen.decode_seconds) {
      decode_rate = double(p.num_decode_tokens - seen.num_decode_tokens) /
                    (p.decode_seconds - seen.decode_seconds);
    }
    const int newly_finished = p.num_finished - seen.num_finished;
    seen = p;
    py::gil_scoped_acquire gil;
    if (signal_raised()) {
      error.emplace();
      throw Interrupted();
    }
    if (!progress.is_none() && changed) {
      try {
        progress(newly_finished, prefill_rate, decode_rate);
      } catch (py::error_already_set& e) {
        error.emplace(std::move(e));
        throw Interrupted();
      }
    }
  };
  std::vector<GenerationOutput> outputs;
  try {
    py::gil_scoped_release nogil;
    outputs = llm_->generate(prompts, params, nullptr, on_progress);
  } catch (const Interrupted&) {
    throw std::move(*error);  // LLM::generate aborted the call's requests
  }
  py::list result;
  for (const GenerationOutput& o : outputs) result.append(output_dict(o));
  return result;
}

std::unique_ptr<PyStream> PyLLM::stream(std::vector<int32_t> prompt, const SamplingParams& params) {
  std::unique_lock<std::timed_mutex> lock;
  try {
    lock = lock_engine();
  } catch (const Interrupted&) {
    throw py::error_already_set();
  }
  RequestOptions options;
  options.detokenize = tokenizer() != nullptr;
  options.skip_special_tokens = params.skip_special_tokens;
  std::shared_ptr<RequestStream> s;
  {
    py::gil_scoped_release nogil;
    if (!async_) async_ = std::make_unique<AsyncLLMEngine>(llm_->engine());
    s = async_->add_request(std::move(prompt), params, options);
  }
  return std::make_unique<PyStream>(*async_, std::move(s));
}

std::string PyLLM::apply_chat_template(const std::string& messages_json,
                                       const std::string& tools_json, bool add_generation_prompt,
                                       const std::string& kwargs_json,
                                       const std::string& template_source) const {
  ChatOptions options;
  options.tools = parse_json(tools_json, "tools");
  options.add_generation_prompt = add_generation_prompt;
  options.template_kwargs = parse_json(kwargs_json, "chat template kwargs");
  nlohmann::ordered_json messages = parse_json(messages_json, "messages");
  if (template_source.empty()) return llm_->apply_chat_template(messages, options);
  if (!messages.is_array() || messages.empty()) fail("chat: messages must be a non-empty array");
  std::string bos, eos;  // the model's special tokens, when its folder names them
  try {
    const ChatTemplate& model_template = llm_->engine().chat_template();
    bos = model_template.bos_token();
    eos = model_template.eos_token();
  } catch (const Error&) {
  }
  return ChatTemplate(template_source, bos, eos)
      .render(messages, options.tools, options.add_generation_prompt, options.template_kwargs);
}

}  // namespace nanovllm::python
