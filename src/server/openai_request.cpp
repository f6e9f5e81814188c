#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace nanovllm::server {

namespace {

using Json = nlohmann::ordered_json;

const char* type_name(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

// The field, or nullptr when it is absent or null.
const Json* field(const Json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<bool> get_bool(const Json& body, const char* name) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_request(name, "'{}' must be a boolean, got {}", name, type_name(*v));
  return v->get<bool>();
}

std::optional<double> get_number(const Json& body, const char* name) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_request(name, "'{}' must be a number, got {}", name, type_name(*v));
  double d = v->get<double>();
  if (!std::isfinite(d)) bad_request(name, "'{}' must be finite", name);
  return d;
}

std::optional<int64_t> get_int(const Json& body, const char* name, int64_t lo, int64_t hi) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max())) bad_request(name, "'{}' is out of range", name);
    x = int64_t(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9e15) {
    x = int64_t(v->get<double>());
  } else {
    bad_request(name, "'{}' must be an integer, got {}", name, v->is_number() ? "a fraction" : type_name(*v));
  }
  if (x < lo || x > hi) bad_request(name, "'{}' must be in [{}, {}], got {}", name, lo, hi, x);
  return x;
}

void check_range(const char* name, double v, double lo, double hi) {
  if (v < lo || v > hi) bad_request(name, "'{}' must be in [{}, {}], got {}", name, lo, hi, v);
}

std::vector<int32_t> token_array(const Json& a, const char* name) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (const Json& t : a) {
    if (!t.is_number_integer()) bad_request(name, "'{}' token ids must be integers", name);
    int64_t id = t.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      bad_request(name, "'{}' token id {} is out of range", name, id);
    }
    ids.push_back(int32_t(id));
  }
  return ids;
}

void parse_prompts(const Json& body, OpenAIRequest& r, const RequestLimits& limits) {
  const Json* p = field(body, "prompt");
  if (!p) bad_request("prompt", "'prompt' is required");
  auto add_text = [&](const Json& s) {
    if (s.get_ref<const std::string&>().empty()) bad_request("prompt", "'prompt' must not be empty");
    r.prompts.push_back({s.get<std::string>(), {}, false});
  };
  auto add_tokens = [&](const Json& a) {
    if (a.empty()) bad_request("prompt", "'prompt' must not be empty");
    r.prompts.push_back({"", token_array(a, "prompt"), true});
  };
  if (p->is_string()) {
    add_text(*p);
  } else if (p->is_array()) {
    if (p->empty()) bad_request("prompt", "'prompt' must not be empty");
    if ((*p)[0].is_number()) {
      add_tokens(*p);
    } else {
      if (int64_t(p->size()) > limits.max_prompts) {
        bad_request("prompt", "at most {} prompts in one request, got {}", limits.max_prompts, p->size());
      }
      for (const Json& e : *p) {
        if (e.is_string()) {
          add_text(e);
        } else if (e.is_array()) {
          add_tokens(e);
        } else {
          bad_request("prompt", "'prompt' must be a string, an array of strings, an array of token "
                      "ids or an array of token id arrays");
        }
      }
    }
  } else {
    bad_request("prompt", "'prompt' must be a string or an array, got {}", type_name(*p));
  }
}

// Text of a message's content: a string, or an array of {"type": "text", "text": ...} parts.
Json flatten_content(const Json& content, size_t i) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) bad_request("messages", "messages[{}].content must be a string or an array of parts", i);
  std::string text;
  for (const Json& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      bad_request("messages", "messages[{}].content: only {{\"type\": \"text\", \"text\": ...}} parts are supported", i);
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

void parse_messages(const Json& body, OpenAIRequest& r) {
  const Json* m = field(body, "messages");
  if (!m) bad_request("messages", "'messages' is required");
  if (!m->is_array() || m->empty()) bad_request("messages", "'messages' must be a non-empty array");
  r.messages = Json::array();
  for (size_t i = 0; i < m->size(); ++i) {
    const Json& msg = (*m)[i];
    if (!msg.is_object()) bad_request("messages", "messages[{}] must be an object", i);
    auto role = msg.find("role");
    if (role == msg.end() || !role->is_string()) bad_request("messages", "messages[{}].role must be a string", i);
    const std::string& rs = role->get_ref<const std::string&>();
    if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool" && rs != "developer") {
      bad_request("messages", "messages[{}].role '{}' is not one of system, user, assistant, tool, developer", i, rs);
    }
    Json out = msg;
    if (rs == "developer") out["role"] = "system";
    auto content = msg.find("content");
    if (content == msg.end()) {
      if (rs != "assistant") bad_request("messages", "messages[{}].content is required", i);
      out["content"] = "";  // templates test `... in content`: an assistant tool call has ""
    } else {
      out["content"] = flatten_content(*content, i);
      if (out["content"].is_null()) {
        if (rs != "assistant") bad_request("messages", "messages[{}].content must not be null", i);
        out["content"] = "";
      }
    }
    if (msg.contains("tool_calls") && !msg["tool_calls"].is_null() && !msg["tool_calls"].is_array()) {
      bad_request("messages", "messages[{}].tool_calls must be an array", i);
    }
    r.messages.push_back(std::move(out));
  }
}

void parse_tools(const Json& body, OpenAIRequest& r) {
  if (const Json* t = field(body, "tools")) {
    if (!t->is_array()) bad_request("tools", "'tools' must be an array");
    for (size_t i = 0; i < t->size(); ++i) {
      const Json& tool = (*t)[i];
      if (!tool.is_object() || tool.value("type", "") != "function" || !tool.contains("function") ||
          !tool["function"].is_object() || !tool["function"].contains("name") ||
          !tool["function"]["name"].is_string()) {
        bad_request("tools", "tools[{}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", i);
      }
    }
    if (!t->empty()) r.tools = *t;
  }
  if (const Json* c = field(body, "tool_choice")) {
    if (c->is_string()) {
      r.tool_choice = c->get<std::string>();
      if (r.tool_choice != "none" && r.tool_choice != "auto" && r.tool_choice != "required") {
        bad_request("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or a function, got '{}'", r.tool_choice);
      }
    } else {
      const Json* f = c->is_object() ? field(*c, "function") : nullptr;
      if (!f || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string())
        bad_request("tool_choice", "a named tool_choice is {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}");
      r.tool_choice = "function";
      r.tool_choice_name = (*f)["name"].get<std::string>();
    }
    if (r.tool_choice == "required" || r.tool_choice == "function") {
      if (r.tools.is_null()) bad_request("tool_choice", "tool_choice '{}' needs 'tools'", r.tool_choice);
      bool found = r.tool_choice == "required";
      for (const Json& t : r.tools) found = found || t["function"]["name"] == r.tool_choice_name;
      if (!found) bad_request("tool_choice", "tool_choice names '{}', which is not among the tools", r.tool_choice_name);
    }
  }
}

// tool_choice "required" or a named function, as vLLM enforces them: the output is constrained to
// JSON (a named function: its parameters schema; required: a non-empty array of {"name",
// "parameters"} objects, one alternative per tool) and parsed into tool_calls by the server
// (serving_output.cpp), whatever the model's own tool-call format.
void constrain_tool_choice(OpenAIRequest& r) {
  if (r.tool_choice != "required" && r.tool_choice != "function") return;
  if (r.params.structured_outputs)
    bad_request("tool_choice", "tool_choice '{}' cannot be combined with response_format or structured_outputs", r.tool_choice);
  auto parameters = [](const Json& tool) {
    const Json* p = field(tool["function"], "parameters");
    return p ? *p : Json{{"type", "object"}};
  };
  Json schema;
  if (r.tool_choice == "function") {
    for (const Json& t : r.tools)
      if (t["function"]["name"] == r.tool_choice_name) schema = parameters(t);
  } else {
    Json any = Json::array();
    for (const Json& t : r.tools) {
      any.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", t["function"]["name"]}}}, {"parameters", parameters(t)}}},
                     {"required", {"name", "parameters"}}});
    }
    schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any}}}};
  }
  r.params.structured_outputs.emplace().json = schema.dump();
}

// response_format (OpenAI: text, json_object, json_schema {name, schema, strict}) and vLLM's
// structured_outputs {json, regex, choice, grammar, json_object}: at most one constraint. The
// grammar engine compiles it when the request is queued (an Error there is a 400 naming the
// keyword). A schema given as an object is passed on as its JSON text.
void parse_structured(const Json& body, OpenAIRequest& r) {
  std::optional<StructuredOutputsParams> so;
  if (const Json* f = field(body, "response_format")) {
    if (!f->is_object() || !f->contains("type") || !(*f)["type"].is_string())
      bad_request("response_format", "'response_format' must be an object with a string 'type'");
    const std::string type = (*f)["type"].get<std::string>();
    if (type == "json_object") {
      so.emplace().json_object = true;
    } else if (type == "json_schema") {
      const Json* js = field(*f, "json_schema");
      if (!js || !js->is_object())
        bad_request("response_format", "response_format 'json_schema' needs a 'json_schema' object");
      const Json* schema = field(*js, "schema");
      if (!schema || !schema->is_object())
        bad_request("response_format", "response_format.json_schema needs a 'schema' object");
      so.emplace().json = schema->dump();
    } else if (type != "text") {
      bad_request("response_format", "response_format type must be 'text', 'json_object' or 'json_schema', got '{}'", type);
    }
  }
  if (const Json* s = field(body, "structured_outputs")) {
    if (so) bad_request("structured_outputs", "give either 'response_format' or 'structured_outputs', not both");
    if (!s->is_object()) bad_request("structured_outputs", "'structured_outputs' must be an object");
    StructuredOutputsParams& p = so.emplace();
    for (const auto& [key, v] : s->items()) {
      if (v.is_null()) continue;
      if (key == "json") {
        if (!v.is_object() && !v.is_string() && !v.is_boolean())
          bad_request("structured_outputs", "structured_outputs.json must be a schema (object or string)");
        p.json = v.is_string() ? v.get<std::string>() : v.dump();
      } else if (key == "json_object") {
        if (!v.is_boolean()) bad_request("structured_outputs", "structured_outputs.json_object must be a boolean");
        p.json_object = v.get<bool>();
      } else if (key == "regex" || key == "grammar") {
        if (!v.is_string()) bad_request("structured_outputs", "structured_outputs.{} must be a string", key);
        (key == "regex" ? p.regex : p.grammar) = v.get<std::string>();
      } else if (key == "choice") {
        if (!v.is_array()) bad_request("structured_outputs", "structured_outputs.choice must be an array of strings");
        std::vector<std::string> c;
        for (const Json& x : v) {
          if (!x.is_string()) bad_request("structured_outputs", "structured_outputs.choice must be an array of strings");
          c.push_back(x.get<std::string>());
        }
        p.choice = std::move(c);
      } else {
        bad_request("structured_outputs", "structured_outputs.{} is not supported (json, regex, choice, grammar, json_object)", key);
      }
    }
  }
  r.params.structured_outputs = std::move(so);
}

void parse_sampling(const Json& body, OpenAIRequest& r, const RequestLimits& limits) {
  SamplingParams& p = r.params;
  if (auto v = get_number(body, "temperature")) {
    check_range("temperature", *v, 0, 100);
    p.temperature = float(*v);
  }
  if (auto v = get_number(body, "top_p")) {
    if (!(*v > 0 && *v <= 1)) bad_request("top_p", "'top_p' must be in (0, 1], got {}", *v);
    p.top_p = float(*v);
  }
  if (auto v = get_int(body, "top_k", -1, std::numeric_limits<int32_t>::max())) p.top_k = int(*v);
  if (auto v = get_number(body, "min_p")) {
    check_range("min_p", *v, 0, 1);
    p.min_p = float(*v);
  }
  if (auto v = get_number(body, "presence_penalty")) {
    check_range("presence_penalty", *v, -2, 2);
    p.presence_penalty = float(*v);
  }
  if (auto v = get_number(body, "frequency_penalty")) {
    check_range("frequency_penalty", *v, -2, 2);
    p.frequency_penalty = float(*v);
  }
  if (auto v = get_number(body, "repetition_penalty")) {
    if (!(*v > 0 && *v <= 100)) bad_request("repetition_penalty", "'repetition_penalty' must be in (0, 100], got {}", *v);
    p.repetition_penalty = float(*v);
  }
  if (auto v = get_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    p.seed = uint64_t(*v);
  }
  if (auto v = get_int(body, "n", 1, limits.max_n)) p.n = int(*v);
  if (auto v = get_int(body, "best_of", 1, limits.max_n)) {
    if (*v != p.n) bad_request("best_of", "'best_of' other than n is not supported");
  }
  // max_tokens 0 is allowed with echo (the prompt and its logprobs alone, as vLLM).
  std::optional<int64_t> max_tokens = get_int(body, "max_tokens", 0, std::numeric_limits<int32_t>::max());
  if (max_tokens == 0) {
    if (r.chat || !get_bool(body, "echo").value_or(false)) {
      bad_request("max_tokens", "'max_tokens' must be >= 1 (0 only with 'echo': true), got 0");
    }
    r.echo_only = true;
    max_tokens = 1;  // the engine computes the prompt and samples one token, which is not shown
  }
  if (r.chat) {
    if (auto v = get_int(body, "max_completion_tokens", 1, std::numeric_limits<int32_t>::max())) max_tokens = v;
  }
  r.max_tokens_given = max_tokens.has_value();
  p.max_tokens = max_tokens ? int(*max_tokens) : 0;
  if (auto v = get_int(body, "min_tokens", 0, std::numeric_limits<int32_t>::max())) {
    if (max_tokens && *v > *max_tokens) bad_request("min_tokens", "'min_tokens' ({}) must be <= max_tokens ({})", *v, *max_tokens);
    p.min_tokens = int(*v);
  }
  if (auto v = get_bool(body, "ignore_eos")) p.ignore_eos = *v;
  if (auto v = get_bool(body, "skip_special_tokens")) p.skip_special_tokens = *v;
  if (auto v = get_bool(body, "include_stop_str_in_output")) p.include_stop_str_in_output = *v;
  if (const Json* s = field(body, "stop")) {
    if (s->is_string()) {
      p.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (int64_t(s->size()) > limits.max_stop_strings) bad_request("stop", "at most {} stop strings", limits.max_stop_strings);
      for (const Json& e : *s) {
        if (!e.is_string()) bad_request("stop", "'stop' must be a string or an array of strings");
        p.stop.push_back(e.get<std::string>());
      }
    } else {
      bad_request("stop", "'stop' must be a string or an array of strings, got {}", type_name(*s));
    }
    for (const std::string& e : p.stop) {
      if (e.empty()) bad_request("stop", "stop strings must not be empty");
    }
  }
  if (const Json* s = field(body, "stop_token_ids")) {
    if (!s->is_array()) bad_request("stop_token_ids", "'stop_token_ids' must be an array of token ids");
    p.stop_token_ids = token_array(*s, "stop_token_ids");
  }
  if (const Json* b = field(body, "logit_bias")) {
    if (!b->is_object()) bad_request("logit_bias", "'logit_bias' must be an object of token id -> bias");
    if (int64_t(b->size()) > limits.max_logit_bias) bad_request("logit_bias", "at most {} logit_bias entries", limits.max_logit_bias);
    for (auto it = b->begin(); it != b->end(); ++it) {
      const std::string& key = it.key();
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != key.size() || id < 0 || id > std::numeric_limits<int32_t>::max()) {
        bad_request("logit_bias", "logit_bias key '{}' is not a token id", key);
      }
      if (!it.value().is_number() || !std::isfinite(it.value().get<double>())) {
        bad_request("logit_bias", "logit_bias[{}] must be a finite number", key);
      }
      p.logit_bias[int32_t(id)] = float(std::clamp(it.value().get<double>(), -100.0, 100.0));
    }
  }
  // logprobs: completions take an integer, chat a boolean plus top_logprobs.
  if (r.chat) {
    bool want = get_bool(body, "logprobs").value_or(false);
    auto top = get_int(body, "top_logprobs", 0, limits.max_logprobs);
    if (top && !want) bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (want) p.logprobs = int(top.value_or(0));
    r.top_logprobs = int(top.value_or(0));
  } else if (auto v = get_int(body, "logprobs", 0, limits.max_logprobs)) {
    p.logprobs = int(*v);
    if (get_bool(body, "echo").value_or(false)) p.prompt_logprobs = int(*v);  // echo shows them
  }
  // vLLM's extra field: each choice then has "prompt_logprobs" (None, then {id: {...}} per token).
  if (auto v = get_int(body, "prompt_logprobs", 0, limits.max_logprobs)) {
    r.return_prompt_logprobs = true;
    p.prompt_logprobs = std::max(int(*v), p.prompt_logprobs.value_or(0));
  }
}

}  // namespace

OpenAIRequest parse_openai_request(std::string_view text, bool chat, const RequestLimits& limits) {
  return openai_request_from_json(decode_json(text, limits.json), chat, limits);
}

OpenAIRequest openai_request_from_json(const Json& body, bool chat, const RequestLimits& limits) {
  if (!body.is_object()) bad_request("", "the body must be a JSON object, got {}", type_name(body));
  OpenAIRequest r;
  r.chat = chat;
  if (const Json* m = field(body, "model")) {
    if (!m->is_string()) bad_request("model", "'model' must be a string");
    r.model = m->get<std::string>();
  }
  if (chat) {
    parse_messages(body, r);
    parse_tools(body, r);
    if (auto v = get_bool(body, "add_generation_prompt")) r.add_generation_prompt = *v;
    if (auto v = get_bool(body, "continue_final_message")) r.continue_final_message = *v;
    if (r.continue_final_message && r.add_generation_prompt && field(body, "add_generation_prompt")) {
      bad_request("continue_final_message", "'continue_final_message' and 'add_generation_prompt' cannot both be true");
    }
    if (r.continue_final_message) r.add_generation_prompt = false;
    if (const Json* k = field(body, "chat_template_kwargs")) {
      if (!k->is_object()) bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      r.chat_template_kwargs = *k;
    }
  } else {
    parse_prompts(body, r, limits);
    if (auto v = get_bool(body, "echo")) r.echo = *v;
    if (const Json* s = field(body, "suffix")) {
      if (!s->is_string() || !s->get_ref<const std::string&>().empty()) bad_request("suffix", "'suffix' is not supported");
    }
  }
  parse_structured(body, r);
  parse_sampling(body, r, limits);
  if (auto v = get_bool(body, "stream")) r.stream = *v;
  if (chat) constrain_tool_choice(r);
  if (const Json* o = field(body, "stream_options")) {
    if (!r.stream) bad_request("stream_options", "'stream_options' needs 'stream': true");
    if (!o->is_object()) bad_request("stream_options", "'stream_options' must be an object");
    if (auto v = get_bool(*o, "include_usage")) r.include_usage = *v;
    if (auto v = get_bool(*o, "continuous_usage_stats")) r.continuous_usage_stats = *v;
  }
  if (const Json* u = field(body, "user")) {
    if (!u->is_string()) bad_request("user", "'user' must be a string");
  }
  return r;
}

}  // namespace nanovllm::server
