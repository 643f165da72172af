// libFuzzer target: a Jinja chat template (chat_template.jinja or tokenizer_config.json's
// "chat_template" in a model directory): lexer, parser and interpreter. The first byte picks the
// dialect; the rest is the template, rendered with the variables a chat template sees. The
// interpreter's bounds are lowered so a runaway template fails fast instead of slowing the run.
#include <cstdint>
#include <string_view>

#include "chat/jinja_template.h"

namespace {

const rw::Json& Context() {
  static const rw::Json ctx = rw::Json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi <b>"}, {"type": "image"}]},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "f", "arguments": {"x": 1.5, "y": [true, null, "s"]}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "{\"ok\": true}"},
      {"role": "assistant", "content": "Done.", "reasoning": "think"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
      "parameters": {"type": "object", "properties": {"x": {"type": "number"}},
                     "required": ["x"]}}}],
    "add_generation_prompt": true, "enable_thinking": false,
    "bos_token": "<bos>", "eos_token": "<eos>", "n": 3, "f": -0.5, "s": "\u00e9\u2581"
  })");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  rw::jinja::RenderOptions options;
  options.dialect = data[0] & 1 ? rw::jinja::Dialect::kHuggingFaceJs : rw::jinja::Dialect::kPython;
  options.max_output_bytes = 1u << 20;
  options.max_steps = 200'000;
  const std::string_view source(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto tpl = rw::jinja::Template::Parse(source);
  if (!tpl.ok()) return 0;
  (void)tpl->Render(Context(), options);
  return 0;
}
