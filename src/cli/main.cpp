// redwing: the command-line entry point. Dispatches to the registered subcommands.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "cli/commands.h"
#include "cli/version.h"

namespace rw::cli {

std::vector<Command>& CommandRegistry() {
  static std::vector<Command> registry;
  return registry;
}

int ReportError(const std::string& command, const Status& status) {
  std::fprintf(stderr, "redwing %s: error: %s\n", command.c_str(), status.message().c_str());
  return status.code() == ErrorCode::kInvalidArgument ? 2 : 1;
}

namespace {
void PrintUsage(FILE* out) {
  std::fprintf(out,
               "redwing: run large Mixture-of-Experts models in little memory.\n\n"
               "usage: redwing <command> [options]   (redwing <command> --help for its options)\n\n"
               "commands:\n");
  auto cmds = CommandRegistry();
  std::sort(cmds.begin(), cmds.end(),
            [](const Command& a, const Command& b) { return a.name < b.name; });
  for (const Command& c : cmds)
    std::fprintf(out, "  %-14s %s\n", c.name.c_str(), c.summary.c_str());
}
}  // namespace

}  // namespace rw::cli

int main(int argc, char** argv) {
  using namespace rw::cli;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    // The commit is the one the build was configured at; absent outside a git checkout.
    if (REDWING_GIT_COMMIT[0] != '\0')
      std::printf("redwing %s (%s)\n", REDWING_VERSION, REDWING_GIT_COMMIT);
    else
      std::printf("redwing %s\n", REDWING_VERSION);
    return 0;
  }
  for (const Command& c : CommandRegistry()) {
    if (c.name == argv[1]) return c.fn(Args(argv + 2, argv + argc));
  }
  std::fprintf(stderr, "redwing: unknown command '%s'\n\n", argv[1]);
  PrintUsage(stderr);
  return 2;
}
