// redwing run: one generation from a chat message, a conversation file, raw text or token ids,
// streamed to stdout, with statistics on stderr.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "base/file.h"
#include "base/json.h"
#include "cli/chat_output.h"
#include "cli/commands.h"
#include "cli/diagnostics.h"
#include "cli/flags.h"
#include "cli/generation_flags.h"
#include "engine/conversation.h"
#include "engine/drafter_dflash.h"
#include "engine/generate.h"

namespace rw::cli {
namespace {

std::string JoinIds(const std::vector<int>& ids, const char* sep) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) s += sep;
    s += std::to_string(ids[i]);
  }
  return s;
}

// --messages-file: an OpenAI-style messages array, or an object with "messages" (and "tools").
Status ReadMessagesFile(const std::string& path, Json* messages, Json* tools) {
  RW_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  RW_ASSIGN_OR_RETURN(Json j, ParseJson(text, path));
  if (j.is_object() && j.contains("messages")) {
    *messages = j["messages"];
    if (j.contains("tools")) *tools = j["tools"];
  } else {
    *messages = j;
  }
  if (!messages->is_array() || messages->empty())
    return Error(ErrorCode::kInvalidArgument,
                 "{}: expected a non-empty JSON array of messages (or {{\"messages\": [...]}})",
                 path);
  return Status::Ok();
}

int Run(const Args& args) {
  Flags flags("run",
              "redwing run --model <dir> (--chat-prompt <text> | --messages-file <f.json> | "
              "--prompt <text> | --prompt-ids 2,17,99) [options]",
              "Generates an answer and streams it to stdout; statistics go to stderr.\n"
              "  --chat-prompt: one user message in the model's chat format (with --system)\n"
              "  --messages-file: an OpenAI-style messages array\n"
              "    (message text stays text: '<turn|>' in it is not a control token)\n"
              "  --prompt: raw completion of <bos> + text (special-token text such as\n"
              "    '<turn|>' becomes control tokens)\n"
              "  --prompt-ids: raw completion of the given token ids");
  AddEngineFlags(flags);
  flags.String("chat-prompt", "", "a user message, sent in the chat format");
  flags.String("system", "", "system message for --chat-prompt");
  flags.String("messages-file", "", "JSON file with an OpenAI-style messages array");
  flags.String("prompt", "", "raw text to continue (a <bos> is put before it)");
  flags.String("prompt-ids", "", "comma-separated prompt token ids");
  flags.String("thinking", "off", "let the model think before answering: on or off");
  AddSamplingFlags(flags);
  AddSpeculationFlags(flags);
  flags.String("speculation-log", "",
               "with --drafter: write one JSON line per verify step to this file: "
               "{\"position\": P, \"drafted\": [ids], \"accepted\": N, \"k\": K} (P: the "
               "position of the first drafted token; K: the drafts asked for, the auto policy's "
               "choice)");
  flags.Bool("print-ids", "print the generated ids (space-separated, one line) instead of text");
  flags.Bool("print-prompt-ids", "print the prompt's ids (a JSON array) on the first line");
  flags.Bool("quiet", "no statistics or thinking on stderr");
  AddDiagnosticsFlags(flags);
  if (Status st = flags.Parse(args); !st.ok()) return ReportError("run", st);
  if (flags.help_requested()) {
    std::fputs(flags.HelpText().c_str(), stdout);
    return 0;
  }
  int sources = 0;
  for (const char* f : {"chat-prompt", "messages-file", "prompt", "prompt-ids"})
    sources += flags.IsSet(f) ? 1 : 0;
  if (sources != 1)
    return ReportError("run", Status(ErrorCode::kInvalidArgument,
                                     sources == 0 ? "give a prompt: --chat-prompt, "
                                                    "--messages-file, --prompt or --prompt-ids"
                                                  : "give only one of --chat-prompt, "
                                                    "--messages-file, --prompt, --prompt-ids"));
  const bool chat = flags.IsSet("chat-prompt") || flags.IsSet("messages-file");
  if (flags.IsSet("system") && !flags.IsSet("chat-prompt"))
    return ReportError("run", Status(ErrorCode::kInvalidArgument,
                                     "--system goes with --chat-prompt (put a system message "
                                     "in the --messages-file instead)"));
  if (flags.IsSet("thinking") && !chat)
    return ReportError("run", Status(ErrorCode::kInvalidArgument,
                                     "--thinking applies to --chat-prompt and --messages-file"));
  auto thinking = ThinkingFromFlags(flags);
  if (!thinking.ok()) return ReportError("run", thinking.status());
  auto gen = GenerateOptionsFromFlags(flags);
  if (!gen.ok()) return ReportError("run", gen.status());
  DrafterSpec drafter;
  if (Status st = SpeculationFromFlags(flags, /*allow_oracle=*/false, &drafter, &gen->draft_tokens);
      !st.ok())
    return ReportError("run", st);
  gen->drafter = MakeDrafter(drafter);
  const std::string log_path = flags.GetString("speculation-log");
  if (!log_path.empty() && gen->drafter == nullptr && drafter.kind == DrafterSpec::Kind::kOff &&
      (flags.IsSet("drafter") || DefaultDrafterDir(flags.GetString("model")).empty()))
    return ReportError(
        "run", Status(ErrorCode::kInvalidArgument, "--speculation-log needs a --drafter (ngram)"));
  Json messages, tools;
  if (flags.IsSet("messages-file")) {
    if (Status st = ReadMessagesFile(flags.GetString("messages-file"), &messages, &tools); !st.ok())
      return ReportError("run", st);
  }
  std::vector<int> prompt_ids;
  if (flags.IsSet("prompt-ids")) {
    if (flags.GetString("prompt-ids").empty())
      return ReportError("run", Status(ErrorCode::kInvalidArgument,
                                       "empty prompt: --prompt-ids needs at least one token id"));
    auto ids = ParseIdList(flags.GetString("prompt-ids"), "--prompt-ids");
    if (!ids.ok()) return ReportError("run", ids.status());
    if (ids->empty())
      return ReportError("run", Status(ErrorCode::kInvalidArgument,
                                       "empty prompt: --prompt-ids needs at least one token id"));
    prompt_ids = *ids;
  }

  auto opt = EngineOptionsFromFlags(flags);
  if (!opt.ok()) return ReportError("run", opt.status());
  Diagnostics diag(flags, "run", args);  // recording from before the load
  auto engine_or = Engine::Load(*opt);
  if (!engine_or.ok()) return ReportError("run", engine_or.status());
  std::shared_ptr<Engine> engine = *engine_or;
  // A DFlash drafter: --drafter <dir>, else <model>/drafter when there is one (--drafter off
  // turns it off).
  auto drafted = DrafterFromFlags(flags, drafter, *engine, opt->model_dir, &gen->draft_tokens);
  if (!drafted.ok()) return ReportError("run", drafted.status());
  gen->drafter = *drafted;
  const Tokenizer* tok = engine->tokenizer();
  if (tok == nullptr && !flags.IsSet("prompt-ids"))
    return ReportError("run", engine->text_status());
  if (tok == nullptr && !gen->stop_strings.empty())
    return ReportError(
        "run", Status(ErrorCode::kInvalidArgument,
                      "--stop needs the model's tokenizer: " + engine->text_status().message()));

  if (flags.IsSet("chat-prompt")) {
    messages = Json::array();
    if (flags.IsSet("system"))
      messages.push_back(Json{{"role", "system"}, {"content", flags.GetString("system")}});
    messages.push_back(Json{{"role", "user"}, {"content", flags.GetString("chat-prompt")}});
  }
  if (chat) {
    auto ids = EncodeChat(*engine, messages, tools, /*add_generation_prompt=*/true, *thinking);
    if (!ids.ok()) return ReportError("run", ids.status());
    prompt_ids = *ids;
  } else if (flags.IsSet("prompt")) {
    for (int32_t id : tok->Encode(flags.GetString("prompt"), /*add_bos=*/true))
      prompt_ids.push_back(id);
  }
  gen->stop_ids = engine->stop_ids();
  if (flags.GetBool("print-prompt-ids")) {
    std::printf("[%s]\n", JoinIds(prompt_ids, ", ").c_str());
    std::fflush(stdout);
  }

  const bool quiet = flags.GetBool("quiet");
  const bool print_ids = flags.GetBool("print-ids") || tok == nullptr;
  ChatPrinter printer(quiet);
  GenerateCallbacks cb;
  if (!print_ids) {
    cb.on_text = [&](std::string_view text) {
      if (chat) {
        printer.Feed(text);
      } else {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      }
      return true;
    };
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log(nullptr, &std::fclose);
  if (!log_path.empty()) {
    log.reset(std::fopen(log_path.c_str(), "w"));
    if (!log)
      return ReportError(
          "run", Status(ErrorCode::kIo,
                        fmt::format("--speculation-log {}: {}", log_path, std::strerror(errno))));
    cb.on_speculation = [&](const SpeculationStep& st) {
      const Json line = {{"position", st.position},
                         {"drafted", st.drafted},
                         {"accepted", st.accepted},
                         {"k", st.chosen}};
      std::fprintf(log.get(), "%s\n", line.dump().c_str());
    };
  }
  auto session = engine->NewSession();
  SessionTimeline timeline(*session);
  const ExpertStoreStats experts_before = engine->expert_stats();
  auto r = Generate(timeline, tok, prompt_ids, *gen, cb);
  if (!r.ok()) return ReportError("run", r.status());
  if (log && std::fclose(log.release()) != 0)
    return ReportError(
        "run", Status(ErrorCode::kIo, fmt::format("--speculation-log {}: write failed", log_path)));
  if (print_ids) {
    std::vector<int> out = r->ids;
    if (r->stop_id >= 0) out.push_back(r->stop_id);  // ids mode shows the stop id, as before
    std::printf("%s\n", JoinIds(out, " ").c_str());
  } else {
    if (chat) printer.Finish();
    std::printf("\n");
  }
  std::fflush(stdout);
  if (!quiet) {
    std::fprintf(stderr, "%s\n", StatsLine(*r, *gen).c_str());
    const std::string ex =
        ExpertStatsText(experts_before, engine->expert_stats(),
                        r->prompt_tokens - r->reused_tokens + static_cast<int64_t>(r->ids.size()));
    if (!ex.empty())
      std::fprintf(stderr, "%s (%s store)\n", ex.c_str(), flags.GetString("expert-store").c_str());
  }
  diag.set_quiet(quiet);
  if (Status st = diag.Finish(); !st.ok()) return ReportError("run", st);
  return 0;
}

REDWING_COMMAND("run", "generate text from a chat message, a prompt or token ids", Run);

}  // namespace
}  // namespace rw::cli
