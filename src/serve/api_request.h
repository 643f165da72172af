// OpenAI request bodies: parsed and validated into what the engine needs. Every supported field
// is type-checked; values redwing cannot honour (n > 1, image parts, logprobs, JSON response
// formats, forced tool choice) are refused with a message naming the field, never silently
// ignored; unknown fields are ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "engine/generate.h"

namespace rw::serve {

// An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null
};
std::string ApiErrorBody(const ApiError& e);
ApiError BadRequest(std::string message, std::string param = "", std::string code = "");

struct RequestLimits {
  int max_messages = 1024;
  int max_stop = 16;
  size_t max_stop_bytes = 256;
  int max_tools = 128;
  int max_json_depth = 64;
};

struct ApiDefaults {
  SamplingParams sampling;  // seed: used when random_seed is false
  bool random_seed = true;  // a request without "seed" draws one
  int64_t max_tokens = 1024;
};

// The defaults as request fields (temperature, top_p, top_k, min_p, repetition_penalty,
// max_tokens, seed), for clients such as the chat page to show: a request that sends them back
// is served as one without them. seed is null when each request draws its own.
Json ApiDefaultsJson(const ApiDefaults& d);

struct ApiRequest {
  bool chat = true;
  // chat
  Json messages;  // as sent (validated)
  Json tools;     // null or array (null when tool_choice is "none")
  bool thinking = false;
  // completions
  bool prompt_is_ids = false;
  std::string prompt_text;
  // "parse_special": true: special-token text in prompt_text (e.g. "<turn|>") becomes control
  // tokens; by default it is plain text.
  bool parse_special = false;
  std::vector<int> prompt_ids;
  // both
  std::string model;
  GenerateOptions gen;  // sampling, max_new_tokens, stop strings (not stop ids)
  bool stream = false;
  bool include_usage = false;
};

// body: the raw request body. chat: /chat/completions (else /completions).
std::optional<ApiError> ParseApiRequest(const std::string& body, bool chat,
                                        const RequestLimits& limits, const ApiDefaults& defaults,
                                        ApiRequest* out);

}  // namespace rw::serve
