#include "serve/api_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace rw::serve {

std::string ApiErrorBody(const ApiError& e) {
  Json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? Json() : Json(e.param)},
              {"code", e.code.empty() ? Json() : Json(e.code)}};
  return Json{{"error", err}}.dump(-1, ' ', false, Json::error_handler_t::replace);
}

namespace {
// A float as the shortest decimal that reads back as it (0.2f as 0.2, not 0.20000000298...).
double ShortestDouble(float f) {
  return std::stod(fmt::format("{}", f));
}
}  // namespace

Json ApiDefaultsJson(const ApiDefaults& d) {
  const SamplingParams& s = d.sampling;
  return Json{{"temperature", ShortestDouble(s.temperature)},
              {"top_p", ShortestDouble(s.top_p)},
              {"top_k", s.top_k},
              {"min_p", ShortestDouble(s.min_p)},
              {"repetition_penalty", ShortestDouble(s.repetition_penalty)},
              {"max_tokens", d.max_tokens},
              {"seed", d.random_seed ? Json() : Json(s.seed)}};
}

ApiError BadRequest(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

namespace {

using Err = std::optional<ApiError>;

const char* TypeName(const Json& j) {
  return j.type_name();
}

Err WrongType(const std::string& param, const char* want, const Json& got) {
  return BadRequest(fmt::format("'{}' must be {}, not {}", param, want, TypeName(got)), param,
                    "invalid_type");
}

// Reads an optional number field within [lo, hi]. Absent or null leaves *out.
Err Number(const Json& body, const char* key, double lo, double hi, double* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return WrongType(key, "a number", *it);
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi))
    return BadRequest(fmt::format("'{}' must be between {} and {}, not {}", key, lo, hi, v), key,
                      "invalid_value");
  *out = v;
  return std::nullopt;
}

Err Integer(const Json& body, const char* key, int64_t lo, int64_t hi,
            std::optional<int64_t>* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  int64_t v;
  if (it->is_number_float()) {
    const double d = it->get<double>();
    if (d != std::trunc(d)) return WrongType(key, "an integer", *it);
    // Whole numbers past int64 (1e19; an integer too long for uint64 parses as a float) saturate
    // as large unsigned values do: converting them to int64 would be undefined.
    if (d >= 0x1p63)
      v = INT64_MAX;
    else if (d < -0x1p63)
      v = INT64_MIN;
    else
      v = static_cast<int64_t>(d);
  } else if (!it->is_number_integer()) {
    return WrongType(key, "an integer", *it);
  } else if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    v = INT64_MAX;
  } else {
    v = it->get<int64_t>();
  }
  if (v < lo || v > hi)
    return BadRequest(fmt::format("'{}' must be between {} and {}, not {}", key, lo, hi, v), key,
                      "invalid_value");
  *out = v;
  return std::nullopt;
}

Err Bool(const Json& body, const char* key, bool* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return WrongType(key, "a boolean", *it);
  *out = it->get<bool>();
  return std::nullopt;
}

Err Unsupported(const std::string& param, const std::string& what) {
  return BadRequest(fmt::format("'{}': {} is not supported by this server", param, what), param,
                    "unsupported_value");
}

Err CheckContent(const Json& content, const std::string& param, bool allow_null) {
  if (content.is_string()) return std::nullopt;
  if (content.is_null()) {
    if (allow_null) return std::nullopt;
    return BadRequest(fmt::format("'{}' is required", param), param, "invalid_value");
  }
  if (!content.is_array())
    return WrongType(param, "a string or an array of content parts", content);
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string p = fmt::format("{}[{}]", param, i);
    if (!part.is_object()) return WrongType(p, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string())
      return BadRequest(fmt::format("'{}.type' must be a string", p), p + ".type", "invalid_type");
    if (*type != "text")
      return Unsupported(p + ".type",
                         fmt::format("content of type '{}' (only text)", type->get<std::string>()));
    auto text = part.find("text");
    if (text == part.end() || !text->is_string())
      return BadRequest(fmt::format("'{}.text' must be a string", p), p + ".text", "invalid_type");
  }
  return std::nullopt;
}

Err CheckMessages(const Json& body, const RequestLimits& limits) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null())
    return BadRequest("'messages' is required", "messages", "missing_required_parameter");
  if (!it->is_array()) return WrongType("messages", "an array", *it);
  if (it->empty()) return BadRequest("'messages' must not be empty", "messages", "invalid_value");
  if (static_cast<int>(it->size()) > limits.max_messages)
    return BadRequest(
        fmt::format("'messages' has {} entries; the limit is {}", it->size(), limits.max_messages),
        "messages", "invalid_value");
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string p = fmt::format("messages[{}]", i);
    if (!m.is_object()) return WrongType(p, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return BadRequest(fmt::format("'{}.role' must be a string", p), p + ".role", "invalid_type");
    const std::string r = *role;
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
      return BadRequest(fmt::format("'{}.role' must be system, developer, user, assistant or "
                                    "tool, not '{}'",
                                    p, r),
                        p + ".role", "invalid_value");
    const bool assistant = r == "assistant";
    auto content = m.find("content");
    const Json content_v = content == m.end() ? Json() : *content;
    if (Err e = CheckContent(content_v, p + ".content", assistant)) return e;
    if (auto n = m.find("name"); n != m.end() && !n->is_null() && !n->is_string())
      return WrongType(p + ".name", "a string", *n);
    if (r == "tool") {
      auto id = m.find("tool_call_id");
      if (id != m.end() && !id->is_null() && !id->is_string())
        return WrongType(p + ".tool_call_id", "a string", *id);
    }
    if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
      if (!assistant)
        return BadRequest(fmt::format("'{}.tool_calls' is only allowed on assistant messages", p),
                          p + ".tool_calls", "invalid_value");
      if (!tc->is_array()) return WrongType(p + ".tool_calls", "an array", *tc);
      for (size_t k = 0; k < tc->size(); ++k) {
        const Json& call = (*tc)[k];
        const std::string cp = fmt::format("{}.tool_calls[{}]", p, k);
        if (!call.is_object()) return WrongType(cp, "an object", call);
        auto fn = call.find("function");
        if (fn == call.end() || !fn->is_object())
          return BadRequest(fmt::format("'{}.function' must be an object", cp), cp + ".function",
                            "invalid_type");
        auto name = fn->find("name");
        if (name == fn->end() || !name->is_string())
          return BadRequest(fmt::format("'{}.function.name' must be a string", cp),
                            cp + ".function.name", "invalid_type");
        auto args = fn->find("arguments");
        if (args != fn->end() && !args->is_null() && !args->is_string() && !args->is_object())
          return WrongType(cp + ".function.arguments", "a JSON string", *args);
      }
    }
    for (const char* k : {"reasoning", "reasoning_content"})
      if (auto x = m.find(k); x != m.end() && !x->is_null() && !x->is_string())
        return WrongType(p + "." + k, "a string", *x);
  }
  return std::nullopt;
}

Err CheckTools(const Json& body, const RequestLimits& limits, Json* tools) {
  *tools = Json();
  auto it = body.find("tools");
  if (it != body.end() && !it->is_null()) {
    if (!it->is_array()) return WrongType("tools", "an array", *it);
    if (static_cast<int>(it->size()) > limits.max_tools)
      return BadRequest(
          fmt::format("'tools' has {} entries; the limit is {}", it->size(), limits.max_tools),
          "tools", "invalid_value");
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& t = (*it)[i];
      const std::string p = fmt::format("tools[{}]", i);
      if (!t.is_object()) return WrongType(p, "an object", t);
      auto type = t.find("type");
      if (type == t.end() || *type != "function")
        return BadRequest(fmt::format("'{}.type' must be \"function\"", p), p + ".type",
                          "invalid_value");
      auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object())
        return BadRequest(fmt::format("'{}.function' must be an object", p), p + ".function",
                          "invalid_type");
      auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || name->get<std::string>().empty())
        return BadRequest(fmt::format("'{}.function.name' must be a non-empty string", p),
                          p + ".function.name", "invalid_value");
      if (auto params = fn->find("parameters");
          params != fn->end() && !params->is_null() && !params->is_object())
        return WrongType(p + ".function.parameters", "an object", *params);
    }
    if (!it->empty()) *tools = *it;
  }
  auto choice = body.find("tool_choice");
  if (choice != body.end() && !choice->is_null()) {
    if (choice->is_string()) {
      const std::string c = *choice;
      if (c == "none") {
        *tools = Json();
      } else if (c == "required") {
        return Unsupported("tool_choice", "\"required\"");
      } else if (c != "auto") {
        return BadRequest("'tool_choice' must be \"none\", \"auto\" or \"required\"", "tool_choice",
                          "invalid_value");
      }
    } else if (choice->is_object()) {
      return Unsupported("tool_choice", "forcing a named function");
    } else {
      return WrongType("tool_choice", "a string", *choice);
    }
  }
  return std::nullopt;
}

Err CheckStop(const Json& body, const RequestLimits& limits, std::vector<std::string>* out) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  std::vector<std::string> stops;
  if (it->is_string()) {
    stops.push_back(*it);
  } else if (it->is_array()) {
    if (static_cast<int>(it->size()) > limits.max_stop)
      return BadRequest(
          fmt::format("'stop' has {} strings; the limit is {}", it->size(), limits.max_stop),
          "stop", "invalid_value");
    for (const Json& s : *it) {
      if (!s.is_string()) return WrongType("stop[]", "a string", s);
      stops.push_back(s);
    }
  } else {
    return WrongType("stop", "a string or an array of strings", *it);
  }
  for (const std::string& s : stops) {
    if (s.empty()) return BadRequest("'stop' strings must not be empty", "stop", "invalid_value");
    if (s.size() > limits.max_stop_bytes)
      return BadRequest(
          fmt::format("'stop' strings are limited to {} bytes", limits.max_stop_bytes), "stop",
          "invalid_value");
  }
  *out = std::move(stops);
  return std::nullopt;
}

Err CheckPrompt(const Json& body, ApiRequest* out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null())
    return BadRequest("'prompt' is required", "prompt", "missing_required_parameter");
  const Json* p = &*it;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    out->prompt_text = *p;
    return std::nullopt;
  }
  if (!p->is_array()) return WrongType("prompt", "a string or an array of token ids", *p);
  if (p->empty()) return BadRequest("'prompt' must not be empty", "prompt", "invalid_value");
  for (const Json& id : *p) {
    if (id.is_string() || id.is_array())
      return Unsupported("prompt", "more than one prompt per request");
    if (!id.is_number_integer()) return WrongType("prompt[]", "an integer token id", id);
    const int64_t v = id.get<int64_t>();
    if (v < 0 || v > INT32_MAX)
      return BadRequest(fmt::format("token id {} is out of range", v), "prompt", "invalid_value");
    out->prompt_ids.push_back(static_cast<int>(v));
  }
  out->prompt_is_ids = true;
  return std::nullopt;
}

// The deepest nesting of arrays and objects in JSON text (strings skipped), so absurdly deep
// documents are refused before anything recurses over them.
int JsonDepth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escape = false;
  for (char c : text) {
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

}  // namespace

std::optional<ApiError> ParseApiRequest(const std::string& body_text, bool chat,
                                        const RequestLimits& limits, const ApiDefaults& defaults,
                                        ApiRequest* out) {
  *out = ApiRequest();
  out->chat = chat;
  if (JsonDepth(body_text) > limits.max_json_depth)
    return BadRequest(fmt::format("the request body nests arrays and objects more than {} deep",
                                  limits.max_json_depth),
                      "", "invalid_json");
  Json body;
  try {
    body = Json::parse(body_text);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999
    return BadRequest(fmt::format("the request body is not valid JSON: {}", e.what()), "",
                      "invalid_json");
  }
  if (!body.is_object())
    return BadRequest("the request body must be a JSON object", "", "invalid_json");

  if (auto m = body.find("model"); m != body.end() && !m->is_null()) {
    if (!m->is_string()) return WrongType("model", "a string", *m);
    out->model = *m;
  }
  if (chat) {
    if (Err e = CheckMessages(body, limits)) return e;
    out->messages = body["messages"];
    if (Err e = CheckTools(body, limits, &out->tools)) return e;
    if (auto k = body.find("chat_template_kwargs"); k != body.end() && !k->is_null()) {
      if (!k->is_object()) return WrongType("chat_template_kwargs", "an object", *k);
      if (Err e = Bool(*k, "enable_thinking", &out->thinking)) return e;
    }
    if (auto rf = body.find("response_format"); rf != body.end() && !rf->is_null()) {
      if (!rf->is_object()) return WrongType("response_format", "an object", *rf);
      auto t = rf->find("type");
      if (t == rf->end() || !t->is_string())
        return BadRequest("'response_format.type' must be a string", "response_format.type",
                          "invalid_type");
      if (*t != "text")
        return Unsupported("response_format",
                           fmt::format("type '{}' (only \"text\")", t->get<std::string>()));
    }
    bool logprobs = false;
    if (Err e = Bool(body, "logprobs", &logprobs)) return e;
    if (logprobs) return Unsupported("logprobs", "returning log probabilities");
    if (auto t = body.find("top_logprobs"); t != body.end() && !t->is_null())
      return Unsupported("top_logprobs", "returning log probabilities");
  } else {
    if (Err e = CheckPrompt(body, out)) return e;
    if (Err e = Bool(body, "parse_special", &out->parse_special)) return e;
    if (auto lp = body.find("logprobs");
        lp != body.end() && !lp->is_null() && *lp != 0 && *lp != false)
      return Unsupported("logprobs", "returning log probabilities");
    bool echo = false;
    if (Err e = Bool(body, "echo", &echo)) return e;
    if (echo) return Unsupported("echo", "echoing the prompt");
    if (auto s = body.find("suffix"); s != body.end() && !s->is_null())
      return Unsupported("suffix", "a suffix (fill-in-the-middle)");
    std::optional<int64_t> best_of;
    if (Err e = Integer(body, "best_of", 1, 1 << 20, &best_of)) return e;
    if (best_of && *best_of != 1) return Unsupported("best_of", "best_of > 1");
  }

  std::optional<int64_t> n;
  if (Err e = Integer(body, "n", 1, 1 << 20, &n)) return e;
  if (n && *n != 1) return Unsupported("n", "more than one choice (n > 1)");
  for (const char* k : {"frequency_penalty", "presence_penalty"}) {
    double v = 0;
    if (Err e = Number(body, k, -2, 2, &v)) return e;
    if (v != 0) return Unsupported(k, "a non-zero value (use repetition_penalty)");
  }
  if (auto lb = body.find("logit_bias"); lb != body.end() && !lb->is_null()) {
    if (!lb->is_object()) return WrongType("logit_bias", "an object", *lb);
    if (!lb->empty()) return Unsupported("logit_bias", "a logit bias");
  }

  GenerateOptions& g = out->gen;
  g.sampling = defaults.sampling;
  g.max_new_tokens = defaults.max_tokens;
  double v = g.sampling.temperature;
  if (Err e = Number(body, "temperature", 0, 100, &v)) return e;
  g.sampling.temperature = static_cast<float>(v);
  v = g.sampling.top_p;
  if (Err e = Number(body, "top_p", 0, 1, &v)) return e;
  g.sampling.top_p = static_cast<float>(v);
  v = g.sampling.min_p;
  if (Err e = Number(body, "min_p", 0, 1, &v)) return e;
  g.sampling.min_p = static_cast<float>(v);
  v = g.sampling.repetition_penalty;
  if (Err e = Number(body, "repetition_penalty", 0.01, 100, &v)) return e;
  g.sampling.repetition_penalty = static_cast<float>(v);
  std::optional<int64_t> top_k, max_tokens, max_completion, seed;
  if (Err e = Integer(body, "top_k", -1, 1 << 30, &top_k)) return e;
  if (top_k) g.sampling.top_k = *top_k < 0 ? 0 : static_cast<int>(*top_k);
  if (Err e = Integer(body, "max_tokens", 1, INT64_MAX, &max_tokens)) return e;
  if (Err e = Integer(body, "max_completion_tokens", 1, INT64_MAX, &max_completion)) return e;
  if (max_completion)
    g.max_new_tokens = *max_completion;
  else if (max_tokens)
    g.max_new_tokens = *max_tokens;
  if (Err e = Integer(body, "seed", INT64_MIN, INT64_MAX, &seed)) return e;
  if (seed) {
    g.sampling.seed = static_cast<uint64_t>(*seed);
  } else if (defaults.random_seed) {
    g.sampling.seed = std::random_device{}() >> 1;
  }
  if (Status st = g.sampling.Validate(); !st.ok())
    return BadRequest(st.message(), "", "invalid_value");
  if (Err e = CheckStop(body, limits, &g.stop_strings)) return e;

  if (Err e = Bool(body, "stream", &out->stream)) return e;
  if (auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return WrongType("stream_options", "an object", *so);
    if (Err e = Bool(*so, "include_usage", &out->include_usage)) return e;
  }
  return std::nullopt;
}

}  // namespace rw::serve
