// redwing logits --model <dir> --ids 2,17,99 [--out file]: the logits of every prompt position,
// as raw little-endian float32 [n_ids, vocab] (row-major), or the top 5 per position.
#include <algorithm>
#include <cstdio>
#include <numeric>

#include "base/file.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/generation_flags.h"
#include "engine/engine.h"

namespace rw::cli {
namespace {

int Logits(const Args& args) {
  Flags flags("logits", "redwing logits --model <dir> --ids 2,17,99 [--out <file>]",
              "Runs a prompt and writes the logits of every position (raw little-endian float32 "
              "[n_ids, vocab]), or prints the top 5 per position without --out.");
  AddEngineFlags(flags);
  flags.String("ids", "", "comma-separated prompt token ids (required)");
  flags.String("out", "", "output file for the raw logits");
  if (Status st = flags.Parse(args); !st.ok()) return ReportError("logits", st);
  if (flags.help_requested()) {
    std::fputs(flags.HelpText().c_str(), stdout);
    return 0;
  }
  auto opt = EngineOptionsFromFlags(flags);
  if (!opt.ok()) return ReportError("logits", opt.status());
  if (flags.GetString("ids").empty())
    return ReportError("logits", Status(ErrorCode::kInvalidArgument,
                                        "empty prompt: --ids needs at least one token id"));
  auto ids = ParseIdList(flags.GetString("ids"), "--ids");
  if (!ids.ok()) return ReportError("logits", ids.status());

  auto engine = Engine::Load(*opt);
  if (!engine.ok()) return ReportError("logits", engine.status());
  auto session = (*engine)->NewSession();
  auto logits = session->Prefill(*ids, /*all_logits=*/true);
  if (!logits.ok()) return ReportError("logits", logits.status());

  const int64_t V = (*engine)->config().vocab_size;
  const std::string out = flags.GetString("out");
  if (!out.empty()) {
    // The host is little-endian (x86-64 / aarch64), so the floats are written as they are.
    std::string_view bytes(reinterpret_cast<const char*>(logits->data()),
                           logits->size() * sizeof(float));
    if (Status st = WriteFileAtomic(out, bytes); !st.ok()) return ReportError("logits", st);
    return 0;
  }
  std::vector<int> order(V);
  for (size_t p = 0; p < ids->size(); ++p) {
    const float* row = logits->data() + p * V;
    std::iota(order.begin(), order.end(), 0);
    const int k = static_cast<int>(std::min<int64_t>(5, V));
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    std::printf("pos %zu (id %d):", p, (*ids)[p]);
    for (int i = 0; i < k; ++i) std::printf(" %d:%.4f", order[i], row[order[i]]);
    std::printf("\n");
  }
  return 0;
}

REDWING_COMMAND("logits", "print or save the logits of every prompt position", Logits);

}  // namespace
}  // namespace rw::cli
