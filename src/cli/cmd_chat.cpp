// redwing chat --model <dir>: an interactive conversation. Every turn reuses the KV cache of the
// turns before it; /reset, /system <text> and /exit manage it; Ctrl-C stops the current answer.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cli/chat_output.h"
#include "cli/commands.h"
#include "cli/diagnostics.h"
#include "cli/flags.h"
#include "cli/generation_flags.h"
#include "engine/conversation.h"
#include "engine/generate.h"

namespace rw::cli {
namespace {

std::atomic<bool> g_interrupted{false};
// Written by the handler so the prompt's poll(2) wakes: the kernel may deliver SIGINT to any of
// the engine's threads, so an interrupted read(2) on the main thread cannot be relied on.
int g_wake[2] = {-1, -1};

void OnSigint(int) {
  g_interrupted.store(true);
  const int saved = errno;
  if (g_wake[1] >= 0) (void)!::write(g_wake[1], "x", 1);
  errno = saved;
}

// Reads lines from fd 0, waiting in poll(2) on it and on the handler's wake pipe, so Ctrl-C at
// the prompt ends the wait (whichever thread took the signal) instead of killing the program or
// being swallowed by stdio.
class LineReader {
 public:
  enum class Got { kLine, kEof, kInterrupted, kError };
  Got Next(std::string* line) {
    for (;;) {
      if (size_t nl = buf_.find('\n'); nl != std::string::npos) {
        *line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        if (!line->empty() && line->back() == '\r') line->pop_back();
        return Got::kLine;
      }
      pollfd fds[2] = {{0, POLLIN, 0}, {g_wake[0], POLLIN, 0}};
      const int ready = ::poll(fds, g_wake[0] >= 0 ? 2 : 1, -1);
      if (ready < 0 && errno != EINTR) return Got::kError;
      if (ready > 0 && (fds[1].revents & POLLIN) != 0) {
        char drain[64];
        while (::read(g_wake[0], drain, sizeof drain) > 0) {
        }
      }
      if (g_interrupted.exchange(false)) return Got::kInterrupted;
      if (ready <= 0 || (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char tmp[4096];
      const ssize_t n = ::read(0, tmp, sizeof tmp);
      if (n > 0) {
        buf_.append(tmp, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        if (buf_.empty()) return Got::kEof;
        *line = std::move(buf_);
        buf_.clear();
        return Got::kLine;
      }
      if (errno == EINTR) {
        if (g_interrupted.exchange(false)) return Got::kInterrupted;
        continue;
      }
      return Got::kError;
    }
  }

 private:
  std::string buf_;
};

const char kHelp[] =
    "commands: /reset (forget the conversation), /system <text> (set the system message; "
    "/system alone clears it), /exit (or Ctrl-D); Ctrl-C stops an answer\n";

int Chat(const Args& args) {
  Flags flags("chat", "redwing chat --model <dir> [options]",
              "An interactive chat. Type a message and press Enter; the answer streams back. "
              "The conversation and its KV cache are kept between turns.\n" +
                  std::string(kHelp));
  AddEngineFlags(flags);
  flags.String("system", "", "system message");
  flags.String("thinking", "off", "let the model think before answering: on or off");
  AddSamplingFlags(flags);
  AddSpeculationFlags(flags);
  flags.Bool("quiet", "no statistics or thinking on stderr");
  AddDiagnosticsFlags(flags);
  if (Status st = flags.Parse(args); !st.ok()) return ReportError("chat", st);
  if (flags.help_requested()) {
    std::fputs(flags.HelpText().c_str(), stdout);
    return 0;
  }
  auto thinking = ThinkingFromFlags(flags);
  if (!thinking.ok()) return ReportError("chat", thinking.status());
  auto gen = GenerateOptionsFromFlags(flags);
  if (!gen.ok()) return ReportError("chat", gen.status());
  DrafterSpec drafter;
  if (Status st = SpeculationFromFlags(flags, /*allow_oracle=*/false, &drafter, &gen->draft_tokens);
      !st.ok())
    return ReportError("chat", st);
  auto opt = EngineOptionsFromFlags(flags);
  if (!opt.ok()) return ReportError("chat", opt.status());
  Diagnostics diag(flags, "chat", args);  // recording from before the load, written at exit
  auto engine_or = Engine::Load(*opt);
  if (!engine_or.ok()) return ReportError("chat", engine_or.status());
  std::shared_ptr<Engine> engine = *engine_or;
  if (engine->tokenizer() == nullptr) return ReportError("chat", engine->text_status());
  auto drafted = DrafterFromFlags(flags, drafter, *engine, opt->model_dir, &gen->draft_tokens);
  if (!drafted.ok()) return ReportError("chat", drafted.status());
  gen->drafter = *drafted;
  // One policy for the whole conversation: what it measured and learned carries over turns.
  if (gen->drafter != nullptr && gen->draft_tokens == kDraftTokensAuto)
    gen->draft_policy = std::make_shared<DraftPolicy>();
  gen->stop_ids = engine->stop_ids();
  const bool quiet = flags.GetBool("quiet");

  struct sigaction sa {};
  sa.sa_handler = OnSigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a Ctrl-C at the prompt must interrupt read(2)
  if (::pipe2(g_wake, O_NONBLOCK | O_CLOEXEC) != 0) g_wake[0] = g_wake[1] = -1;
  sigaction(SIGINT, &sa, nullptr);

  Conversation conv(engine, *thinking);
  if (flags.IsSet("system")) conv.SetSystem(flags.GetString("system"));
  auto session = engine->NewSession();
  SessionTimeline timeline(*session);
  const bool tty = ::isatty(0) == 1;
  if (tty && !quiet) std::fputs(kHelp, stderr);

  LineReader reader;
  for (;;) {
    if (tty) {  // piped input gets answers only
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    std::string line;
    const LineReader::Got got = reader.Next(&line);
    if (got == LineReader::Got::kEof || got == LineReader::Got::kError) {
      if (tty) std::fputs("\n", stdout);
      break;
    }
    if (got == LineReader::Got::kInterrupted) {
      std::fputs("\n(Ctrl-C stops an answer; /exit or Ctrl-D quits)\n", stdout);
      continue;
    }
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      conv.Reset();
      session->Reset();
      std::fputs("[conversation cleared]\n", stdout);
      continue;
    }
    if (line == "/system" || line.rfind("/system ", 0) == 0) {
      conv.SetSystem(line.size() > 8 ? line.substr(8) : "");
      std::fputs(line.size() > 8 ? "[system message set]\n" : "[system message cleared]\n", stdout);
      continue;
    }
    if (line == "/help" || (line[0] == '/' && line.find(' ') == std::string::npos)) {
      if (line != "/help") std::printf("unknown command %s\n", line.c_str());
      std::fputs(kHelp, stdout);
      continue;
    }

    auto prompt = conv.PromptFor(line);
    if (!prompt.ok()) {
      std::fprintf(stderr, "error: %s\n", prompt.status().message().c_str());
      continue;
    }
    g_interrupted.store(false);
    ChatPrinter printer(quiet);
    GenerateCallbacks cb;
    cb.cancel = &g_interrupted;
    cb.on_text = [&](std::string_view text) {
      printer.Feed(text);
      return true;
    };
    auto r = Generate(timeline, engine->tokenizer(), *prompt, *gen, cb);
    if (!r.ok()) {
      // The conversation is unchanged; the context may be full.
      std::fprintf(stderr, "error: %s%s\n", r.status().message().c_str(),
                   r.status().code() == ErrorCode::kOutOfRange ? " (/reset starts over)" : "");
      continue;
    }
    printer.Finish();
    if (r->finish == FinishReason::kCancelled) std::fputs(" [stopped]", stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    g_interrupted.store(false);
    conv.Commit(line, *prompt, *r, printer.content());
    if (!quiet) std::fprintf(stderr, "[%s]\n", StatsLine(*r, *gen).c_str());
  }
  if (Status st = diag.Finish(); !st.ok()) return ReportError("chat", st);
  return 0;
}

REDWING_COMMAND("chat", "chat with the model interactively", Chat);

}  // namespace
}  // namespace rw::cli
