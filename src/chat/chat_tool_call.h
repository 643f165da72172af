// Parses Gemma 4 model output: tool calls written in the template's DSL
//   <|tool_call>call:NAME{key:value,...}<tool_call|>
// (strings wrapped in <|"|>...<|"|>, nested {..} and [..], bare numbers/true/false, keys bare
// or <|"|>-quoted; the inverse of format_argument), thinking channels
//   <|channel>thought\n...<channel|>
// and plain content. ChatOutputParser works incrementally so a server can stream content and
// reasoning deltas while holding back tool-call text until each call is complete.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "base/status.h"

namespace rw {

struct ToolCall {
  std::string name;
  Json arguments = Json::object();
};

// "{key:value,...}" -> JSON object. A missing value (how @huggingface/jinja prints None) and
// None/null/none parse as null; unquoted words that are not numbers or booleans stay strings.
Result<Json> ParseToolArguments(std::string_view text);
// "call:NAME{...}" (the text between <|tool_call> and <tool_call|>).
Result<ToolCall> ParseToolCallBody(std::string_view body);
// Every complete tool call in the output; a malformed or unterminated one is an error.
Result<std::vector<ToolCall>> ParseToolCalls(std::string_view model_output);

struct ParsedAssistantOutput {
  std::string content;    // text outside channels and tool calls
  std::string reasoning;  // thinking-channel text, channel name line removed
  std::vector<ToolCall> tool_calls;
};
Result<ParsedAssistantOutput> ParseAssistantOutput(std::string_view model_output);

class ChatOutputParser {
 public:
  struct Event {
    enum class Kind {
      kContent,          // text: a content delta
      kReasoning,        // text: a thinking delta
      kToolCallStart,    // a tool call began; its text is being held back
      kToolCall,         // tool_call: a complete, parsed call
      kInvalidToolCall,  // text: the raw call, error: why it did not parse
    };
    Kind kind;
    std::string text;
    ToolCall tool_call;
    std::string error;
  };

  // start_in_reasoning: the prompt already opened a thinking channel.
  explicit ChatOutputParser(bool start_in_reasoning = false);

  // Consumes a chunk of decoded model output. Text that could be the start of a marker is held
  // until later input decides it.
  std::vector<Event> Feed(std::string_view chunk);
  // End of output: flushes held text; an unterminated tool call becomes kInvalidToolCall.
  std::vector<Event> Finish();

  bool in_tool_call() const { return state_ == State::kToolCall; }

 private:
  enum class State { kContent, kChannelName, kReasoning, kToolCall };
  void Process(bool final, std::vector<Event>* events);
  void Emit(Event::Kind kind, std::string_view text, std::vector<Event>* events);

  State state_;
  std::string buf_;
};

}  // namespace rw
