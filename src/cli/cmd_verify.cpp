// redwing verify <model-dir>: every check `run` makes when it opens the model (the same code),
// then re-hash every file and expert blob against the manifest.
#include <unistd.h>

#include <cstdio>

#include "cli/commands.h"
#include "cli/flags.h"
#include "engine/engine.h"
#include "format/model_dir.h"

namespace rw::cli {
namespace {

int Verify(const Args& args) {
  Flags flags("verify", "redwing verify <model-dir> [--quiet]",
              "Opens the model as run does (config against weights, expert index and tokenizer),\n"
              "then re-hashes every file (SHA-256) and every expert blob (XXH3).\n"
              "Exits 0 when intact; otherwise names each problem and damaged file and exits 1.");
  flags.Positional("model-dir", "a redwing model directory");
  flags.Bool("quiet", "print nothing on success");
  if (Status st = flags.Parse(args); !st.ok()) return ReportError("verify", st);
  if (flags.help_requested()) {
    std::fputs(flags.HelpText().c_str(), stdout);
    return 0;
  }
  bool quiet = flags.GetBool("quiet");
  bool tty = ::isatty(2);
  auto report = VerifyModelDir(
      flags.positional(0),
      [&](const std::string& what) {
        if (!quiet && tty) std::fprintf(stderr, "\r\033[K%s", what.c_str());
      },
      CheckModelOpens);
  if (!quiet && tty) std::fprintf(stderr, "\r\033[K");
  if (!report.ok()) return ReportError("verify", report.status());
  if (!report->problems.empty()) {
    // An open failure is not (only) damage: the hashes may all match an edited model.
    for (const std::string& p : report->problems)
      std::fprintf(stderr, "%s %s\n",
                   p.rfind("the model does not open", 0) == 0 ? "refused:" : "damaged:", p.c_str());
    std::fprintf(stderr, "redwing verify: %zu problem(s) in %s\n", report->problems.size(),
                 flags.positional(0).c_str());
    return 1;
  }
  if (!quiet)
    std::printf("ok: %s intact (%.2f GB checked)\n", flags.positional(0).c_str(),
                report->bytes_checked / 1e9);
  return 0;
}

}  // namespace
REDWING_COMMAND("verify", "re-hash a model directory against its manifest", Verify);
}  // namespace rw::cli
