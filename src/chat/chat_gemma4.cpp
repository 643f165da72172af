// Each function mirrors one macro or section of the official template; comments name it. A
// missing key ("undefined" in Jinja) is a null pointer, distinct from a JSON null (None).
#include "chat/chat_gemma4.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace rw {
namespace {

using jinja::Dialect;

constexpr int kMaxDepth = 64;  // nested schemas / argument values
constexpr std::string_view kQuote = "<|\"|>";

const Json* Get(const Json* obj, const char* key) {
  if (obj == nullptr || !obj->is_object()) return nullptr;
  auto it = obj->find(key);
  return it == obj->end() ? nullptr : &*it;
}

bool Truthy(const Json* j) {
  if (j == nullptr) return false;
  switch (j->type()) {
    case Json::value_t::boolean:
      return j->get<bool>();
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return j->get<double>() != 0;
    case Json::value_t::string:  // nlohmann's empty() is false for every string
      return !j->get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object:
      return !j->empty();
    default:
      return false;
  }
}

bool IsString(const Json* j) {
  return j != nullptr && j->is_string();
}

// An object's entries in `| dictsort` order: keys compared lower-cased, ties kept in order.
std::vector<std::pair<std::string, const Json*>> DictSort(const Json& obj) {
  std::vector<std::pair<std::string, const Json*>> items;
  for (auto it = obj.begin(); it != obj.end(); ++it) items.emplace_back(it.key(), &it.value());
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    return jinja::ToLower(a.first) < jinja::ToLower(b.first);
  });
  return items;
}

class Renderer {
 public:
  explicit Renderer(Dialect dialect) : dialect_(dialect) {}

  // {{ value }}: str() in the chosen dialect; undefined prints nothing.
  Result<std::string> Str(const Json* j) const {
    if (j == nullptr) return std::string();
    if (j->is_string()) return j->get<std::string>();
    RW_ASSIGN_OR_RETURN(jinja::Value v, jinja::FromJson(*j, dialect_));
    return jinja::Str(v, dialect_);
  }

  std::string Trim(std::string_view s) const { return jinja::StripSpace(s, dialect_); }

  // `for x in value`: array items, object keys, string characters.
  Result<std::vector<Json>> Iterate(const Json* j) const {
    std::vector<Json> out;
    if (j == nullptr) return out;
    if (j->is_array()) return std::vector<Json>(j->begin(), j->end());
    if (j->is_object()) {
      for (auto it = j->begin(); it != j->end(); ++it) out.emplace_back(it.key());
      return out;
    }
    if (j->is_string()) {
      const std::string& s = j->get_ref<const std::string&>();
      size_t pos = 0;
      while (pos < s.size()) {
        size_t start = pos;
        jinja::NextCodepoint(s, &pos);
        out.emplace_back(s.substr(start, pos - start));
      }
      return out;
    }
    return Error(ErrorCode::kInvalidArgument, "'{}' value is not iterable", j->type_name());
  }

  // macro format_argument(argument, escape_keys=True)
  Status FormatArgument(const Json* arg, bool escape_keys, std::string* out, int depth) const {
    if (depth > kMaxDepth)
      return Error(ErrorCode::kInvalidArgument, "tool argument nested too deeply");
    if (arg != nullptr && arg->is_string()) {
      *out += kQuote;
      *out += arg->get_ref<const std::string&>();
      *out += kQuote;
    } else if (arg != nullptr && arg->is_boolean()) {
      *out += arg->get<bool>() ? "true" : "false";
    } else if (arg != nullptr && arg->is_object()) {
      *out += '{';
      bool first = true;
      for (const auto& [key, value] : DictSort(*arg)) {
        if (!first) *out += ',';
        first = false;
        if (escape_keys) {
          *out += kQuote;
          *out += key;
          *out += kQuote;
        } else {
          *out += key;
        }
        *out += ':';
        RW_RETURN_IF_ERROR(FormatArgument(value, escape_keys, out, depth + 1));
      }
      *out += '}';
    } else if ((arg != nullptr && arg->is_array()) ||
               (arg == nullptr && dialect_ == Dialect::kPython)) {
      // An undefined argument passes Python's `is sequence` and renders as an empty list.
      *out += '[';
      if (arg != nullptr) {
        for (size_t i = 0; i < arg->size(); ++i) {
          if (i) *out += ',';
          RW_RETURN_IF_ERROR(FormatArgument(&(*arg)[i], escape_keys, out, depth + 1));
        }
      }
      *out += ']';
    } else {
      RW_ASSIGN_OR_RETURN(std::string s, Str(arg));
      *out += s;
    }
    return Status::Ok();
  }

  // `<|"|>item<|"|>` joined by commas, for the `required` lists.
  Status QuotedList(const Json* list, std::string* out) const {
    RW_ASSIGN_OR_RETURN(std::vector<Json> items, Iterate(list));
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) *out += ',';
      RW_ASSIGN_OR_RETURN(std::string s, Str(&items[i]));
      *out += kQuote;
      *out += s;
      *out += kQuote;
    }
    return Status::Ok();
  }

  // macro format_parameters(properties, required)
  Status FormatParameters(const Json* properties, std::string* out, int depth) const {
    if (depth > kMaxDepth)
      return Error(ErrorCode::kInvalidArgument, "tool parameters nested too deeply");
    if (properties == nullptr || !properties->is_object()) {
      return Error(ErrorCode::kInvalidArgument, "tool parameter properties must be an object");
    }
    static const char* kStandardKeys[] = {"description", "type", "properties", "required",
                                          "nullable"};
    bool found_first = false;
    for (const auto& [key, value] : DictSort(*properties)) {
      // (An init-capture: clang 14, which builds the fuzz targets, cannot capture a binding.)
      if (std::any_of(std::begin(kStandardKeys), std::end(kStandardKeys),
                      [&key = key](const char* k) { return key == k; })) {
        continue;
      }
      bool add_comma = false;
      auto separator = [&] {
        if (add_comma) {
          *out += ',';
        } else {
          add_comma = true;
        }
      };
      if (found_first) *out += ',';
      found_first = true;
      *out += key + ":{";
      const Json* description = Get(value, "description");
      if (Truthy(description)) {
        RW_ASSIGN_OR_RETURN(std::string d, Str(description));
        *out += "description:<|\"|>" + d + "<|\"|>";
        add_comma = true;
      }
      RW_ASSIGN_OR_RETURN(std::string type, Str(Get(value, "type")));
      type = jinja::ToUpper(type);
      if (type == "STRING") {
        const Json* enum_values = Get(value, "enum");
        if (Truthy(enum_values)) {
          separator();
          *out += "enum:";
          RW_RETURN_IF_ERROR(FormatArgument(enum_values, true, out, depth + 1));
        }
      } else if (type == "ARRAY") {
        const Json* items = Get(value, "items");
        if (items != nullptr && items->is_object() && !items->empty()) {
          separator();
          *out += "items:{";
          bool items_first = false;
          for (const auto& [item_key, item_value] : DictSort(*items)) {
            if (item_value->is_null()) continue;
            if (items_first) *out += ',';
            items_first = true;
            if (item_key == "properties") {
              *out += "properties:{";
              if (item_value->is_object())
                RW_RETURN_IF_ERROR(FormatParameters(item_value, out, depth + 1));
              *out += '}';
            } else if (item_key == "required") {
              *out += "required:[";
              RW_RETURN_IF_ERROR(QuotedList(item_value, out));
              *out += ']';
            } else if (item_key == "type") {
              *out += "type:";
              if (item_value->is_string()) {
                Json upper = jinja::ToUpper(item_value->get<std::string>());
                RW_RETURN_IF_ERROR(FormatArgument(&upper, true, out, depth + 1));
              } else {
                // item_value | map('upper') | list
                RW_ASSIGN_OR_RETURN(std::vector<Json> parts, Iterate(item_value));
                Json upper = Json::array();
                for (const Json& p : parts) {
                  RW_ASSIGN_OR_RETURN(std::string s, Str(&p));
                  upper.push_back(jinja::ToUpper(s));
                }
                RW_RETURN_IF_ERROR(FormatArgument(&upper, true, out, depth + 1));
              }
            } else {
              *out += item_key + ":";
              RW_RETURN_IF_ERROR(FormatArgument(item_value, true, out, depth + 1));
            }
          }
          *out += '}';
        }
      }
      if (Truthy(Get(value, "nullable"))) {
        separator();
        *out += "nullable:true";
      }
      if (type == "OBJECT") {
        const Json* nested = Get(value, "properties");
        if (nested != nullptr && nested->is_object()) {
          separator();
          *out += "properties:{";
          RW_RETURN_IF_ERROR(FormatParameters(nested, out, depth + 1));
          *out += '}';
        } else if (value->is_object()) {
          separator();
          *out += "properties:{";
          RW_RETURN_IF_ERROR(FormatParameters(value, out, depth + 1));
          *out += '}';
        }
        const Json* required = Get(value, "required");
        if (Truthy(required)) {
          separator();
          *out += "required:[";
          RW_RETURN_IF_ERROR(QuotedList(required, out));
          *out += ']';
        }
      }
      separator();
      *out += "type:<|\"|>" + type + "<|\"|>}";
    }
    return Status::Ok();
  }

  // macro format_function_declaration(tool_data), before the caller's `| trim`.
  Result<std::string> FormatFunctionDeclaration(const Json& tool) const {
    const Json* function = Get(&tool, "function");
    if (function == nullptr || !function->is_object()) {
      return Error(ErrorCode::kInvalidArgument, "each tool needs a 'function' object");
    }
    std::string out = "declaration:";
    RW_ASSIGN_OR_RETURN(std::string name, Str(Get(function, "name")));
    RW_ASSIGN_OR_RETURN(std::string description, Str(Get(function, "description")));
    out += name + "{description:<|\"|>" + description + "<|\"|>";
    const Json* params = Get(function, "parameters");
    if (Truthy(params)) {
      out += ",parameters:{";
      const Json* properties = Get(params, "properties");
      if (Truthy(properties)) {
        out += "properties:{";
        RW_RETURN_IF_ERROR(FormatParameters(properties, &out, 0));
        out += "},";
      }
      const Json* required = Get(params, "required");
      if (Truthy(required)) {
        out += "required:[";
        RW_RETURN_IF_ERROR(QuotedList(required, &out));
        out += "],";
      }
      const Json* type = Get(params, "type");
      if (Truthy(type)) {
        RW_ASSIGN_OR_RETURN(std::string t, Str(type));
        out += "type:<|\"|>" + jinja::ToUpper(t) + "<|\"|>}";
      }
    }
    if (function->contains("response")) {
      const Json* response = Get(function, "response");  // fields of a non-object are undefined
      out += ",response:{";
      const Json* description = Get(response, "description");
      if (Truthy(description)) {
        RW_ASSIGN_OR_RETURN(std::string d, Str(description));
        out += "description:<|\"|>" + d + "<|\"|>,";
      }
      RW_ASSIGN_OR_RETURN(std::string type, Str(Get(response, "type")));
      if (jinja::ToUpper(type) == "OBJECT") out += "type:<|\"|>OBJECT<|\"|>}";
    }
    out += '}';
    return out;
  }

  // macro strip_thinking(text): drop every <|channel>...<channel|> span, then trim.
  Result<std::string> StripThinking(const Json* text) const {
    if (!IsString(text))
      return Error(ErrorCode::kInvalidArgument, "model message text must be a string");
    const std::string& s = text->get_ref<const std::string&>();
    std::string result;
    size_t start = 0;
    while (true) {
      size_t end = s.find("<channel|>", start);
      std::string_view part(s.data() + start, (end == std::string::npos ? s.size() : end) - start);
      size_t open = part.find("<|channel>");
      result += part.substr(0, open);
      if (end == std::string::npos) break;
      start = end + std::string_view("<channel|>").size();
    }
    return Trim(result);
  }

  // macro format_tool_response_block(tool_name, response)
  Status FormatToolResponse(const Json* tool_name, const Json* response, std::string* out) const {
    if (!IsString(tool_name)) {
      return Error(ErrorCode::kInvalidArgument,
                   "tool response needs a string name (set 'name' or a matching 'tool_call_id')");
    }
    const std::string& name = tool_name->get_ref<const std::string&>();
    *out += "<|tool_response>";
    if (response != nullptr && response->is_object()) {
      *out += "response:" + name + "{";
      bool first = true;
      for (const auto& [key, value] : DictSort(*response)) {
        if (!first) *out += ',';
        first = false;
        *out += key + ":";
        RW_RETURN_IF_ERROR(FormatArgument(value, false, out, 0));
      }
      *out += '}';
    } else {
      *out += "response:" + name + "{value:";
      RW_RETURN_IF_ERROR(FormatArgument(response, false, out, 0));
      *out += '}';
    }
    *out += "<tool_response|>";
    return Status::Ok();
  }

  // The body of an OpenAI role:tool message: a string, or the text parts of a list.
  Result<std::optional<Json>> ToolBody(const Json* content) const {
    if (content == nullptr) return std::optional<Json>(Json());  // follow.get('content') -> None
    if (content->is_string()) return std::optional<Json>(*content);
    if (content->is_array() || content->is_object()) {
      if (content->is_object() && !content->empty()) {
        return Error(ErrorCode::kInvalidArgument,
                     "tool message content must be a string or a list of parts");
      }
      std::string text;
      if (content->is_array()) {
        for (const Json& part : *content) {
          if (!part.is_object())
            return Error(ErrorCode::kInvalidArgument, "tool content parts must be objects");
          const Json* type = Get(&part, "type");
          if (type == nullptr || *type != "text") continue;
          const Json* t = Get(&part, "text");
          if (t == nullptr) continue;  // part.get('text') | default('') on a missing key
          if (!t->is_string())
            return Error(ErrorCode::kInvalidArgument, "tool content text must be a string");
          text += t->get_ref<const std::string&>();
        }
      }
      return std::optional<Json>(Json(text));
    }
    return std::optional<Json>(*content);
  }

  Result<std::string> Render(const Json& messages, const Json& tools, bool add_generation_prompt,
                             bool enable_thinking, std::string_view bos_token) const {
    if (!messages.is_array() || messages.empty()) {
      return Error(ErrorCode::kInvalidArgument, "messages must be a non-empty array");
    }
    for (const Json& m : messages) {
      if (!m.is_object())
        return Error(ErrorCode::kInvalidArgument, "each message must be an object");
      const Json* role = Get(&m, "role");
      if (!IsString(role))
        return Error(ErrorCode::kInvalidArgument, "each message needs a string 'role'");
    }
    std::string out(bos_token);
    std::optional<std::string> prev_type;
    size_t first = 0;
    const std::string& role0 = messages[0]["role"].get_ref<const std::string&>();
    const bool has_system = role0 == "system" || role0 == "developer";
    const Json* tools_p = tools.is_null() ? nullptr : &tools;
    if (enable_thinking || Truthy(tools_p) || has_system) {
      out += "<|turn>system\n";
      if (enable_thinking) {
        out += "<|think|>\n";
        prev_type = "think";
      }
      if (has_system) {
        RW_ASSIGN_OR_RETURN(std::string content, Str(Get(&messages[0], "content")));
        out += Trim(content);
        first = 1;
      }
      if (Truthy(tools_p)) {
        if (!tools.is_array()) return Error(ErrorCode::kInvalidArgument, "tools must be an array");
        for (const Json& tool : tools) {
          RW_ASSIGN_OR_RETURN(std::string decl, FormatFunctionDeclaration(tool));
          out += "<|tool>" + Trim(decl) + "<tool|>";
        }
        prev_type = "tool";
      }
      out += "<turn|>\n";
    }

    const size_t n = messages.size();
    // The last user message (index into loop_messages), for the reasoning guard.
    int64_t last_user = -1;
    for (size_t i = first; i < n; ++i) {
      if (messages[i]["role"] == "user") last_user = static_cast<int64_t>(i - first);
    }

    for (size_t i = first; i < n; ++i) {
      const Json& message = messages[i];
      const std::string& raw_role = message["role"].get_ref<const std::string&>();
      if (raw_role == "tool") continue;
      const int64_t idx = static_cast<int64_t>(i - first);
      prev_type.reset();
      const std::string role = raw_role == "assistant" ? "model" : raw_role;
      // Continuation: consecutive model messages (ignoring tool messages) share one turn.
      const std::string* prev_role = nullptr;
      for (size_t j = i; j > first; --j) {
        const std::string& r = messages[j - 1]["role"].get_ref<const std::string&>();
        if (r != "tool") {
          prev_role = &r;
          break;
        }
      }
      const bool continue_turn =
          role == "model" && prev_role != nullptr && *prev_role == "assistant";
      if (!continue_turn) out += "<|turn>" + role + "\n";

      const Json* tool_calls = Get(&message, "tool_calls");
      const Json* thinking = Get(&message, "reasoning");
      if (!Truthy(thinking)) thinking = Get(&message, "reasoning_content");
      if (Truthy(thinking) && idx > last_user && Truthy(tool_calls)) {
        if (!thinking->is_string())
          return Error(ErrorCode::kInvalidArgument, "reasoning must be a string");
        out += "<|channel>thought\n" + thinking->get<std::string>() + "\n<channel|>";
      }

      if (Truthy(tool_calls)) {
        RW_ASSIGN_OR_RETURN(std::vector<Json> calls, Iterate(tool_calls));
        for (const Json& call : calls) {
          const Json* function = Get(&call, "function");
          const Json* name = Get(function, "name");
          if (!IsString(name))
            return Error(ErrorCode::kInvalidArgument, "each tool call needs function.name");
          out += "<|tool_call>call:" + name->get<std::string>() + "{";
          const Json* args = Get(function, "arguments");
          if (args != nullptr && args->is_object()) {
            bool first_arg = true;
            for (const auto& [key, value] : DictSort(*args)) {
              if (!first_arg) out += ',';
              first_arg = false;
              out += key + ":";
              RW_RETURN_IF_ERROR(FormatArgument(value, false, &out, 0));
            }
          } else if (IsString(args)) {
            out += args->get<std::string>();
          }
          out += "}<tool_call|>";
        }
        prev_type = "tool_call";
      }

      bool responded = false;
      const Json* tool_responses = Get(&message, "tool_responses");
      if (Truthy(tool_responses)) {
        // Legacy Gemma shape: responses embedded in the assistant message.
        RW_ASSIGN_OR_RETURN(std::vector<Json> responses, Iterate(tool_responses));
        for (const Json& r : responses) {
          const Json* name = Get(&r, "name");
          Json unknown = "unknown";
          if (name == nullptr) name = &unknown;
          RW_RETURN_IF_ERROR(FormatToolResponse(name, Get(&r, "response"), &out));
          responded = true;
          prev_type = "tool_response";
        }
      } else if (Truthy(tool_calls)) {
        // OpenAI shape: the role:tool messages that follow answer these calls.
        RW_ASSIGN_OR_RETURN(std::vector<Json> calls, Iterate(tool_calls));
        for (size_t k = i + 1; k < n && messages[k]["role"] == "tool"; ++k) {
          const Json& follow = messages[k];
          Json name = follow.contains("name") ? follow["name"] : Json();
          const Json* call_id = Get(&follow, "tool_call_id");
          for (const Json& call : calls) {
            const Json* id = Get(&call, "id");
            bool same = (id == nullptr || id->is_null())
                            ? (call_id == nullptr || call_id->is_null())
                            : (call_id != nullptr && *id == *call_id);
            if (same) name = call["function"]["name"];
          }
          RW_ASSIGN_OR_RETURN(std::optional<Json> body, ToolBody(Get(&follow, "content")));
          RW_RETURN_IF_ERROR(FormatToolResponse(&name, &*body, &out));
          responded = true;
          prev_type = "tool_response";
        }
      }

      const Json* content = Get(&message, "content");
      if (IsString(content)) {
        if (role == "model") {
          RW_ASSIGN_OR_RETURN(std::string text, StripThinking(content));
          out += text;
        } else {
          out += Trim(content->get_ref<const std::string&>());
        }
      } else if (content != nullptr && content->is_array()) {
        for (const Json& item : *content) {
          const Json* type = Get(&item, "type");
          if (type == nullptr) continue;
          if (*type == "text") {
            if (role == "model") {
              RW_ASSIGN_OR_RETURN(std::string text, StripThinking(Get(&item, "text")));
              out += text;
            } else {
              RW_ASSIGN_OR_RETURN(std::string text, Str(Get(&item, "text")));
              out += Trim(text);
            }
          } else if (*type == "image" || *type == "audio" || *type == "video") {
            const std::string& t = type->get_ref<const std::string&>();
            out += "<|" + t + "|>";
            prev_type = t;
          }
        }
      }

      if (prev_type == "tool_call" && !responded) {
        out += "<|tool_response>";
      } else if (!(responded && !Truthy(content))) {
        out += "<turn|>\n";
      }
    }

    if (add_generation_prompt && prev_type != "tool_response" && prev_type != "tool_call") {
      out += "<|turn>model\n";
      if (!enable_thinking) out += "<|channel>thought\n<channel|>";
    }
    return out;
  }

 private:
  Dialect dialect_;
};

}  // namespace

Result<std::string> Gemma4ChatFormat::Render(const Json& messages, const Json& tools,
                                             bool add_generation_prompt, bool enable_thinking,
                                             std::string_view bos_token) const {
  return Renderer(dialect_).Render(messages, tools, add_generation_prompt, enable_thinking,
                                   bos_token);
}

Result<std::string> Gemma4ChatFormat::FormatArgument(const Json& value, bool escape_keys) const {
  std::string out;
  RW_RETURN_IF_ERROR(Renderer(dialect_).FormatArgument(&value, escape_keys, &out, 0));
  return out;
}

}  // namespace rw
