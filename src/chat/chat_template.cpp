#include "chat/chat_template.h"

#include "base/file.h"
#include "chat/chat_gemma4.h"
#include "chat/jinja_template.h"

namespace rw {

Result<ChatTemplate> ChatTemplate::FromText(std::string text, ChatTemplateOptions options) {
  auto parsed = jinja::Template::Parse(text);
  if (!parsed.ok()) return parsed.status().Annotate("chat template");
  ChatTemplate t;
  t.jinja_ = std::make_shared<const jinja::Template>(std::move(parsed).value());
  t.options_ = options;
  return t;
}

ChatTemplate ChatTemplate::Native(ChatTemplateOptions options) {
  ChatTemplate t;
  t.options_ = options;
  return t;
}

const ChatTemplate& ChatTemplate::Gemma4Default() {
  static const ChatTemplate* kDefault = new ChatTemplate(Native());
  return *kDefault;
}

Result<ChatTemplate> ChatTemplate::FromModelDirectory(const std::string& dir,
                                                      ChatTemplateOptions options) {
  std::string jinja_path = JoinPath(dir, "chat_template.jinja");
  if (PathExists(jinja_path)) {
    // Real templates are ~10 kB and tokenizer_config.json files a few MB: limits far above
    // them, so a damaged file is refused before it is read into memory.
    RW_ASSIGN_OR_RETURN(std::string text, ReadFileToString(jinja_path, 16u << 20));
    auto t = FromText(std::move(text), options);
    if (!t.ok()) return t.status().Annotate(jinja_path);
    return t;
  }
  std::string config_path = JoinPath(dir, "tokenizer_config.json");
  if (PathExists(config_path)) {
    RW_ASSIGN_OR_RETURN(std::string text, ReadFileToString(config_path, 64u << 20));
    RW_ASSIGN_OR_RETURN(Json config, ParseJson(text, config_path));
    const Json* tpl = nullptr;
    if (config.is_object() && config.contains("chat_template")) {
      const Json& ct = config["chat_template"];
      if (ct.is_string()) {
        tpl = &ct;
      } else if (ct.is_array()) {
        // Named templates: [{name, template}], "default" first.
        for (const Json& entry : ct) {
          if (entry.is_object() && entry.value("name", "") == "default" &&
              entry.contains("template")) {
            tpl = &entry["template"];
          }
        }
        if (tpl == nullptr && !ct.empty() && ct[0].is_object() && ct[0].contains("template"))
          tpl = &ct[0]["template"];
      }
    }
    if (tpl != nullptr && tpl->is_string()) {
      auto t = FromText(tpl->get<std::string>(), options);
      if (!t.ok()) return t.status().Annotate(config_path);
      return t;
    }
  }
  return Native(options);
}

Result<Json> ChatTemplate::NormalizeMessages(const Json& messages) {
  if (!messages.is_array()) return Error(ErrorCode::kInvalidArgument, "messages must be an array");
  Json out = messages;
  for (size_t i = 0; i < out.size(); ++i) {
    Json& m = out[i];
    if (!m.is_object())
      return Error(ErrorCode::kInvalidArgument, "message {} must be an object", i);
    if (i == 0 && m.contains("content") && m["content"].is_array() && m.contains("role") &&
        (m["role"] == "system" || m["role"] == "developer")) {
      std::string text;
      for (const Json& part : m["content"]) {
        if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
            part["text"].is_string()) {
          text += jinja::StripSpace(part["text"].get<std::string>(), jinja::Dialect::kPython);
        }
      }
      m["content"] = text;
    }
    if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
      for (Json& call : m["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
          continue;
        Json& fn = call["function"];
        if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
        Json parsed =
            Json::parse(fn["arguments"].get<std::string>(), nullptr, /*allow_exceptions=*/false);
        if (parsed.is_object()) fn["arguments"] = std::move(parsed);
      }
    }
  }
  return out;
}

Result<std::string> ChatTemplate::Render(const Json& messages, const Json& tools,
                                         bool add_generation_prompt, bool enable_thinking,
                                         const Json& extra_context) const {
  if (!tools.is_null() && !tools.is_array())
    return Error(ErrorCode::kInvalidArgument, "tools must be null or an array");
  if (!extra_context.is_null() && !extra_context.is_object()) {
    return Error(ErrorCode::kInvalidArgument, "extra_context must be null or an object");
  }
  RW_ASSIGN_OR_RETURN(Json normalized, NormalizeMessages(messages));
  if (jinja_ == nullptr) {
    std::string bos = "<bos>";
    if (extra_context.is_object() && extra_context.contains("bos_token") &&
        extra_context["bos_token"].is_string()) {
      bos = extra_context["bos_token"].get<std::string>();
    }
    auto r = Gemma4ChatFormat(options_.dialect)
                 .Render(normalized, tools, add_generation_prompt, enable_thinking, bos);
    if (r.ok() && r->size() > options_.max_output_bytes) {
      return Error(ErrorCode::kResourceExhausted, "rendered prompt exceeds {} bytes",
                   options_.max_output_bytes);
    }
    return r;
  }
  Json context = Json::object();
  context["messages"] = std::move(normalized);
  context["tools"] = tools;
  context["add_generation_prompt"] = add_generation_prompt;
  context["enable_thinking"] = enable_thinking;
  context["bos_token"] = "<bos>";
  context["eos_token"] = "<eos>";
  context["pad_token"] = "<pad>";
  context["unk_token"] = "<unk>";
  if (extra_context.is_object()) {
    for (auto it = extra_context.begin(); it != extra_context.end(); ++it)
      context[it.key()] = it.value();
  }
  jinja::RenderOptions render;
  render.dialect = options_.dialect;
  render.max_output_bytes = options_.max_output_bytes;
  auto r = jinja_->Render(context, render);
  if (!r.ok()) return r.status().Annotate("chat template");
  return r;
}

}  // namespace rw
