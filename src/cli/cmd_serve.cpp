// redwing serve: the OpenAI-compatible HTTP server and the chat page, until SIGINT or SIGTERM.
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "cli/commands.h"
#include "cli/diagnostics.h"
#include "cli/flags.h"
#include "cli/generation_flags.h"
#include "cli/test_hooks.h"
#include "serve/server.h"

namespace rw::cli {
namespace {

int Serve(const Args& args) {
  Flags flags("serve", "redwing serve --model <dir> [--host 127.0.0.1] [--port 8080] [options]",
              "Serves the model over an OpenAI-compatible HTTP API (/v1/chat/completions,\n"
              "/v1/completions, /v1/models; also under /api/v1) and a chat page at /.\n"
              "Plain HTTP: put a TLS proxy in front before exposing it beyond this machine.\n"
              "The sampling flags set the defaults of requests that do not give their own.");
  AddEngineFlags(flags);
  flags.String("host", "127.0.0.1", "address to listen on");
  flags.Int("port", 8080, "TCP port (0: any free port; the chosen one is printed)");
  flags.StringList("api-key",
                   "require 'Authorization: Bearer <key>' on /v1; repeat for several keys, each "
                   "its own client of the prompt cache (default: $REDWING_API_KEY)");
  flags.StringList("cors-origin",
                   "an origin (e.g. https://app.example) whose pages may call the API from a "
                   "browser, besides loopback origins and the server's own page; repeatable; "
                   "'*' allows any");
  flags.String("model-id", "gemma-4-26b-a4b-it", "the model name the API reports");
  flags.Int("max-queue", 8, "requests that may wait behind the running one (beyond: 503)");
  flags.Int("max-connections", 64, "open connections at once (beyond: 503 and close)");
  flags.Int("max-connections-per-ip", 32,
            "open connections from one client address (beyond: 429 and close; 0: no limit)");
  flags.String("max-body", "4M", "largest request body (413 beyond)");
  flags.Int("max-messages", 1024, "most messages in one chat request");
  flags.Double("header-timeout", 10, "seconds a client has to send a request's headers");
  flags.Double("body-timeout", 30, "seconds a client has to send a request's body");
  flags.Double("idle-timeout", 30, "seconds a kept-alive connection may sit idle");
  flags.Double("write-timeout", 30, "seconds a write may wait for a client that does not read");
  flags.Double("sse-keepalive", 2,
               "seconds between SSE comments while a streamed request waits (queue, prefill)");
  AddSamplingFlags(flags);
  AddSpeculationFlags(flags);
  if (GetTestHooks().add_serve_flags) GetTestHooks().add_serve_flags(flags);
  AddDiagnosticsFlags(flags);
  if (Status st = flags.Parse(args); !st.ok()) return ReportError("serve", st);
  if (flags.help_requested()) {
    std::fputs(flags.HelpText().c_str(), stdout);
    return 0;
  }
  auto gen = GenerateOptionsFromFlags(flags);
  if (!gen.ok()) return ReportError("serve", gen.status());
  if (!gen->stop_strings.empty())
    return ReportError("serve", Status(ErrorCode::kInvalidArgument,
                                       "--stop is per request in the server (the 'stop' field)"));
  serve::ServerOptions o;
  o.http.host = flags.GetString("host");
  const long long port = flags.GetInt("port");
  if (port < 0 || port > 65535)
    return ReportError("serve",
                       Error(ErrorCode::kInvalidArgument, "--port must be 0..65535, not {}", port));
  o.http.port = static_cast<int>(port);
  o.api_keys = flags.GetList("api-key");
  if (o.api_keys.empty()) {
    const char* env = std::getenv("REDWING_API_KEY");
    if (env != nullptr && *env != '\0') o.api_keys.push_back(env);
  }
  for (const std::string& k : o.api_keys)
    if (k.empty())
      return ReportError("serve", Status(ErrorCode::kInvalidArgument, "--api-key is empty"));
  o.cors_origins = flags.GetList("cors-origin");
  o.model_id = flags.GetString("model-id");
  if (o.model_id.empty())
    return ReportError("serve", Status(ErrorCode::kInvalidArgument, "--model-id is empty"));
  const long long max_queue = flags.GetInt("max-queue");
  const long long max_conn = flags.GetInt("max-connections");
  const long long max_per_ip = flags.GetInt("max-connections-per-ip");
  const long long max_messages = flags.GetInt("max-messages");
  if (max_queue < 0 || max_queue > 100000)
    return ReportError("serve", Error(ErrorCode::kInvalidArgument,
                                      "--max-queue must be 0..100000, not {}", max_queue));
  if (max_conn < 1 || max_conn > 10000)
    return ReportError("serve", Error(ErrorCode::kInvalidArgument,
                                      "--max-connections must be 1..10000, not {}", max_conn));
  if (max_per_ip < 0 || max_per_ip > 10000)
    return ReportError("serve",
                       Error(ErrorCode::kInvalidArgument,
                             "--max-connections-per-ip must be 0..10000, not {}", max_per_ip));
  if (max_messages < 1 || max_messages > 1000000)
    return ReportError("serve", Error(ErrorCode::kInvalidArgument,
                                      "--max-messages must be 1..1000000, not {}", max_messages));
  o.loop.max_queue = static_cast<int>(max_queue);
  o.http.max_connections = static_cast<int>(max_conn);
  o.http.max_connections_per_ip = static_cast<int>(max_per_ip);
  o.request_limits.max_messages = static_cast<int>(max_messages);
  auto body = ParseByteSize(flags.GetString("max-body"), "--max-body");
  if (!body.ok()) return ReportError("serve", body.status());
  o.http.limits.max_body_bytes = *body;
  struct {
    const char* flag;
    int* ms;
  } timeouts[] = {{"header-timeout", &o.http.limits.header_timeout_ms},
                  {"body-timeout", &o.http.limits.body_timeout_ms},
                  {"idle-timeout", &o.http.limits.idle_timeout_ms},
                  {"write-timeout", &o.http.limits.write_timeout_ms}};
  for (auto& t : timeouts) {
    const double s = flags.GetDouble(t.flag);
    if (!(s > 0 && s <= 86400))
      return ReportError("serve", Error(ErrorCode::kInvalidArgument,
                                        "--{} must be in (0, 86400] seconds, not {}", t.flag, s));
    *t.ms = static_cast<int>(s * 1000);
  }
  const double keepalive = flags.GetDouble("sse-keepalive");
  if (!(keepalive > 0 && keepalive <= 3600))
    return ReportError("serve",
                       Error(ErrorCode::kInvalidArgument,
                             "--sse-keepalive must be in (0, 3600] seconds, not {}", keepalive));
  o.keepalive_ms = static_cast<int>(keepalive * 1000);
  o.defaults.sampling = gen->sampling;
  o.defaults.random_seed = flags.GetInt("seed") < 0;
  o.defaults.max_tokens = gen->max_new_tokens > 0 ? gen->max_new_tokens : 1;
  DrafterSpec drafter;
  if (Status st =
          SpeculationFromFlags(flags, /*allow_oracle=*/false, &drafter, &o.loop.draft_tokens);
      !st.ok())
    return ReportError("serve", st);
  if (GetTestHooks().apply_serve_flags) {
    if (Status st = GetTestHooks().apply_serve_flags(flags, &o); !st.ok())
      return ReportError("serve", st);
  }

  auto opt = EngineOptionsFromFlags(flags);
  if (!opt.ok()) return ReportError("serve", opt.status());
  // SIGINT and SIGTERM are taken by this thread alone (sigwait below). Blocked before the engine
  // starts its thread pool, so every thread inherits the mask and none dies of the signal.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);  // --profile: write the profile so far
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  Diagnostics diag(flags, "serve", args);  // recording from before the load
  auto engine = Engine::Load(*opt);
  if (!engine.ok()) return ReportError("serve", engine.status());
  if ((*engine)->tokenizer() == nullptr) return ReportError("serve", (*engine)->text_status());
  auto drafted = DrafterFromFlags(flags, drafter, **engine, opt->model_dir, &o.loop.draft_tokens);
  if (!drafted.ok()) return ReportError("serve", drafted.status());
  o.loop.drafter = *drafted;

  serve::Server server(*engine, o);
  if (Status st = server.Start(); !st.ok()) return ReportError("serve", st);
  // An IPv6 address goes in brackets in a URL.
  const std::string& host = o.http.host;
  const std::string url_host = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  std::fprintf(stderr,
               "redwing serve: listening on http://%s:%d (model '%s', context %lld tokens%s)\n",
               url_host.c_str(), server.port(), o.model_id.c_str(),
               static_cast<long long>((*engine)->max_context()),
               o.api_keys.empty() ? ", no API key" : ", API key required");
  const bool loopback = host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
  if (!loopback && o.api_keys.empty())
    std::fprintf(stderr,
                 "redwing serve: warning: listening on %s without an API key: anyone who can "
                 "reach this address can use the model (set --api-key)\n",
                 host.c_str());
  std::fflush(stderr);
  int sig = 0;
  for (;;) {
    sigwait(&set, &sig);
    if (sig != SIGUSR1) break;
    // The window since the start or the last dump; recording goes on.
    if (Status st = diag.DumpProfile(); !st.ok())
      std::fprintf(stderr, "redwing serve: %s\n", st.ToString().c_str());
    else if (!diag.profile_path().empty())
      std::fprintf(stderr, "redwing serve: profile written to %s\n", diag.profile_path().c_str());
    std::fflush(stderr);
  }
  std::fprintf(stderr, "redwing serve: stopping (signal %d)\n", sig);
  server.Stop();
  if (Status st = diag.Finish(); !st.ok()) return ReportError("serve", st);
  return 0;
}

REDWING_COMMAND("serve", "serve the model over an OpenAI-compatible HTTP API and a chat page",
                Serve);

}  // namespace
}  // namespace rw::cli
