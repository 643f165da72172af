// Prints a chat answer as it streams: the answer text to stdout, the model's thinking to stderr
// (dimmed on a terminal; hidden with quiet), tool calls as one JSON line each on stdout.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "chat/chat_tool_call.h"

namespace rw::cli {

class ChatPrinter {
 public:
  explicit ChatPrinter(bool quiet);
  void Feed(std::string_view text);
  void Finish();
  // The answer's content (what goes into the conversation as the assistant message).
  const std::string& content() const { return content_; }

 private:
  void Handle(const ChatOutputParser::Event& e);
  ChatOutputParser parser_;
  bool quiet_;
  bool stderr_tty_;
  bool in_thinking_ = false;
  std::string content_;
};

}  // namespace rw::cli
