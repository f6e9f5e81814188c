// nanovllm._C: the C++ engine for the pure-Python package python/nanovllm (which is the API to
// use). nanovllm::Error (bad input: arguments, requests, model folders) becomes ValueError with
// the same message; other C++ exceptions become RuntimeError (MemoryError for std::bad_alloc).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "nanovllm/config.h"
#include "nanovllm/sampling_params.h"
#include "py_llm.h"
#include "tokenizer/tokenizer.h"
#include "util/check.h"

namespace py = pybind11;
using namespace nanovllm;
using nanovllm::python::PyLLM;
using nanovllm::python::PyStream;

namespace {

void bind_config(py::module_& m) {
  py::class_<Config>(m, "Config", "Engine configuration (include/nanovllm/config.h)")
      .def(py::init<>())
      .def_readwrite("model", &Config::model)
      .def_readwrite("max_num_batched_tokens", &Config::max_num_batched_tokens)
      .def_readwrite("max_num_seqs", &Config::max_num_seqs)
      .def_readwrite("max_model_len", &Config::max_model_len)
      .def_readwrite("block_size", &Config::block_size)
      .def_readwrite("kv_cache_memory", &Config::kv_cache_memory)
      .def_readwrite("enable_prefix_caching", &Config::enable_prefix_caching)
      .def_readwrite("kv_cache_dtype", &Config::kv_cache_dtype)
      .def_readwrite("quantization", &Config::quantization)
      .def_readwrite("device", &Config::device)
      .def_readwrite("gpu_memory_utilization", &Config::gpu_memory_utilization)
      .def_readwrite("enforce_eager", &Config::enforce_eager)
      .def_readwrite("num_threads", &Config::num_threads)
      .def_readwrite("tensor_parallel_size", &Config::tensor_parallel_size)
      .def_readwrite("distributed_backend", &Config::distributed_backend)
      .def_readwrite("show_progress", &Config::show_progress);
}

void bind_sampling_params(py::module_& m) {
  // Structured outputs: set exactly one constraint (the engine refuses others when the request
  // is added, with an Error naming the schema keyword or the grammar rule).
  py::class_<StructuredOutputsParams>(m, "StructuredOutputsParams",
                                      "Structured outputs (include/nanovllm/sampling_params.h)")
      .def(py::init<>())
      .def_readwrite("json", &StructuredOutputsParams::json)
      .def_readwrite("json_object", &StructuredOutputsParams::json_object)
      .def_readwrite("regex", &StructuredOutputsParams::regex)
      .def_readwrite("choice", &StructuredOutputsParams::choice)
      .def_readwrite("grammar", &StructuredOutputsParams::grammar);

  // Optional fields read and write None for "unset" (the model's generation_config decides).
  py::class_<SamplingParams>(m, "SamplingParams", "Per-request sampling (include/nanovllm/sampling_params.h)")
      .def(py::init<>())
      .def_readwrite("temperature", &SamplingParams::temperature)
      .def_readwrite("top_k", &SamplingParams::top_k)
      .def_readwrite("top_p", &SamplingParams::top_p)
      .def_readwrite("min_p", &SamplingParams::min_p)
      .def_readwrite("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_readwrite("presence_penalty", &SamplingParams::presence_penalty)
      .def_readwrite("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_readwrite("logit_bias", &SamplingParams::logit_bias)
      .def_readwrite("seed", &SamplingParams::seed)
      .def_readwrite("n", &SamplingParams::n)
      .def_readwrite("max_tokens", &SamplingParams::max_tokens)
      .def_readwrite("min_tokens", &SamplingParams::min_tokens)
      .def_readwrite("ignore_eos", &SamplingParams::ignore_eos)
      .def_readwrite("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_readwrite("stop", &SamplingParams::stop)
      .def_readwrite("include_stop_str_in_output", &SamplingParams::include_stop_str_in_output)
      .def_readwrite("logprobs", &SamplingParams::logprobs)
      .def_readwrite("prompt_logprobs", &SamplingParams::prompt_logprobs)
      .def_readwrite("skip_special_tokens", &SamplingParams::skip_special_tokens)
      .def_readwrite("structured_outputs", &SamplingParams::structured_outputs);
}

void bind_tokenizer(py::module_& m) {
  py::class_<Tokenizer>(m, "Tokenizer", "The model's tokenizer.json (BPE: byte-level or SentencePiece-style)")
      .def("encode",
           [](const Tokenizer& t, std::string_view text, bool parse_special, bool add_special_tokens) {
             return add_special_tokens ? t.encode_with_special_tokens(text, parse_special)
                                       : t.encode(text, parse_special);
           },
           py::arg("text"), py::arg("parse_special") = true, py::arg("add_special_tokens") = false,
           py::call_guard<py::gil_scoped_release>())
      .def("decode", &Tokenizer::decode, py::arg("ids"), py::arg("skip_special_tokens") = false,
           py::call_guard<py::gil_scoped_release>())
      .def("decode_bytes",
           [](const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
             std::string out;
             for (int32_t id : ids) {
               if (const std::string* b = t.token_bytes(id, skip_special_tokens)) out += *b;
             }
             return py::bytes(out);
           },
           py::arg("ids"), py::arg("skip_special_tokens") = false)
      .def("token_to_id", &Tokenizer::token_to_id)
      .def("id_to_token", &Tokenizer::id_to_token)
      .def("is_special", &Tokenizer::is_special)
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("added_tokens", [](const Tokenizer& t) {
        py::list out;
        for (const AddedToken& a : t.added_tokens()) out.append(py::make_tuple(a.id, a.content, a.special));
        return out;
      });
}

void bind_llm(py::module_& m) {
  py::class_<PyStream>(m, "RequestStream", "One request's events; iterate for dicts")
      .def("__iter__", [](PyStream& s) -> PyStream& { return s; }, py::return_value_policy::reference)
      .def("__next__", &PyStream::next)
      .def("close", &PyStream::close)
      .def_property_readonly("request_id", &PyStream::request_id);

  py::class_<PyLLM>(m, "LLM", "The engine: generate, stream, chat template")
      .def(py::init<const Config&>(), py::arg("config"))
      .def("generate", &PyLLM::generate, py::arg("prompts"), py::arg("params"),
           py::arg("progress") = py::none())
      .def("stream", &PyLLM::stream, py::arg("prompt"), py::arg("params"), py::keep_alive<0, 1>())
      .def("apply_chat_template", &PyLLM::apply_chat_template, py::arg("messages_json"),
           py::arg("tools_json"), py::arg("add_generation_prompt"), py::arg("kwargs_json"),
           py::arg("template_source") = "")
      .def_property_readonly("tokenizer", &PyLLM::tokenizer, py::return_value_policy::reference_internal)
      .def_property_readonly("vocab_size", [](PyLLM& l) { return l.engine().model_config().vocab_size; })
      .def_property_readonly("max_model_len", [](PyLLM& l) { return l.engine().config().max_model_len; })
      .def_property_readonly("eos_token_ids", [](PyLLM& l) { return l.engine().model_config().eos_token_ids; })
      .def_property_readonly("device", [](PyLLM& l) { return l.engine().backend().describe(); });
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "nanovllm's C++ engine (use the `nanovllm` package)";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  bind_config(m);
  bind_sampling_params(m);
  bind_tokenizer(m);
  bind_llm(m);
}
