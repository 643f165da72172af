// The test hooks of `redwing-testhooks` (cli/test_hooks.h), linked only into that executable:
//   redwing serve --test-replies FILE: a JSON array of texts the answers are forced to be, in
//     turn (the model still runs every step; only the token choice is overridden), so tests on a
//     random-weight model can drive tool calls and reasoning output.
//   REDWING_INSTALL_ASSUME_FREE_BYTES=N: redwing install takes the output disk to have N bytes
//     free instead of asking statvfs, so the free-space checks can be tested.
#include <cstdlib>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/json.h"
#include "cli/flags.h"
#include "cli/test_hooks.h"
#include "install/installer.h"
#include "serve/server.h"

namespace rw::cli {
namespace {

Status ReadForcedReplies(const std::string& path, std::vector<std::string>* out) {
  RW_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  RW_ASSIGN_OR_RETURN(Json j, ParseJson(text, path));
  if (!j.is_array() || j.empty())
    return Error(ErrorCode::kInvalidArgument, "{}: expected a non-empty JSON array of strings",
                 path);
  for (const Json& s : j) {
    if (!s.is_string())
      return Error(ErrorCode::kInvalidArgument, "{}: expected a JSON array of strings", path);
    out->push_back(s.get<std::string>());
  }
  return Status::Ok();
}

void AddServeFlags(Flags& flags) {
  flags.String("test-replies", "",
               "testing only: JSON array of texts the answers are forced to be, in turn");
}

Status ApplyServeFlags(const Flags& flags, serve::ServerOptions* o) {
  if (!flags.IsSet("test-replies")) return Status::Ok();
  return ReadForcedReplies(flags.GetString("test-replies"), &o->loop.forced_replies);
}

Status AdjustInstall(InstallOptions* o) {
  const char* e = std::getenv("REDWING_INSTALL_ASSUME_FREE_BYTES");
  if (e == nullptr || *e == '\0') return Status::Ok();
  char* end = nullptr;
  const unsigned long long n = std::strtoull(e, &end, 10);
  if (*end != '\0')
    return Error(ErrorCode::kInvalidArgument,
                 "REDWING_INSTALL_ASSUME_FREE_BYTES must be a byte count, not '{}'", e);
  o->assume_free_bytes = n;
  return Status::Ok();
}

[[maybe_unused]] const bool kInstalled = [] {
  TestHooks& h = GetTestHooks();
  h.add_serve_flags = AddServeFlags;
  h.apply_serve_flags = ApplyServeFlags;
  h.adjust_install = AdjustInstall;
  return true;
}();

}  // namespace
}  // namespace rw::cli
