#include "cli/chat_output.h"

#include <unistd.h>

#include <cstdio>

namespace rw::cli {

ChatPrinter::ChatPrinter(bool quiet) : quiet_(quiet), stderr_tty_(::isatty(2) == 1) {}

void ChatPrinter::Feed(std::string_view text) {
  for (const auto& e : parser_.Feed(text)) Handle(e);
}

void ChatPrinter::Finish() {
  for (const auto& e : parser_.Finish()) Handle(e);
  if (in_thinking_ && !quiet_) std::fputs(stderr_tty_ ? "\x1b[0m\n" : "\n", stderr);
  in_thinking_ = false;
  std::fflush(stdout);
}

void ChatPrinter::Handle(const ChatOutputParser::Event& e) {
  using K = ChatOutputParser::Event::Kind;
  if (e.kind != K::kReasoning && in_thinking_) {
    if (!quiet_) std::fputs(stderr_tty_ ? "\x1b[0m\n" : "\n", stderr);
    in_thinking_ = false;
  }
  switch (e.kind) {
    case K::kContent:
      content_ += e.text;
      std::fwrite(e.text.data(), 1, e.text.size(), stdout);
      std::fflush(stdout);
      break;
    case K::kReasoning:
      if (quiet_) break;
      if (!in_thinking_) std::fputs(stderr_tty_ ? "\x1b[2m" : "[thinking] ", stderr);
      in_thinking_ = true;
      std::fwrite(e.text.data(), 1, e.text.size(), stderr);
      std::fflush(stderr);
      break;
    case K::kToolCallStart:
      break;
    case K::kToolCall: {
      const Json call{
          {"tool_call", {{"name", e.tool_call.name}, {"arguments", e.tool_call.arguments}}}};
      std::printf("\n%s\n", call.dump().c_str());
      std::fflush(stdout);
      break;
    }
    case K::kInvalidToolCall:
      std::fprintf(stderr, "\n[the model wrote a tool call that does not parse: %s]\n",
                   e.error.c_str());
      break;
  }
}

}  // namespace rw::cli
