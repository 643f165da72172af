// libFuzzer target: the JSON body of POST /v1/chat/completions and /v1/completions, from the
// network. A body the parser accepts then goes where the server sends it: its messages and tools
// through the chat renderer (the native Gemma 4 format, as a model without its own template
// uses). Accepted requests are checked against the limits the parser promises.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "chat/chat_template.h"
#include "serve/api_request.h"

namespace {

void Require(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_chat_request: broken promise: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  rw::serve::RequestLimits limits;
  limits.max_messages = 64;  // small enough that the renderer stays quick per input
  rw::serve::ApiDefaults defaults;
  for (bool chat : {true, false}) {
    rw::serve::ApiRequest req;
    const auto err = rw::serve::ParseApiRequest(body, chat, limits, defaults, &req);
    if (err) {
      Require(err->status >= 400 && err->status < 600 && !err->message.empty(), "bad error");
      (void)rw::serve::ApiErrorBody(*err);  // must serialize whatever bytes the message holds
      continue;
    }
    Require(req.gen.sampling.Validate().ok(), "accepted sampling parameters fail Validate");
    Require(req.gen.max_new_tokens >= 0, "negative max_tokens accepted");
    Require(static_cast<int>(req.gen.stop_strings.size()) <= limits.max_stop, "too many stops");
    if (chat) {
      Require(req.messages.is_array(), "messages is not an array");
      Require(static_cast<int>(req.messages.size()) <= limits.max_messages, "too many messages");
      // Rendering may refuse (the template's own rules) but must not crash or throw.
      (void)rw::ChatTemplate::Gemma4Default().Render(req.messages, req.tools, true, req.thinking);
    }
  }
  return 0;
}
