// Flags shared by the commands that load a model and generate (run, chat): engine options,
// sampling, and the statistics line they print.
#pragma once

#include <string>

#include "base/status.h"
#include "cli/flags.h"
#include "engine/drafter.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "sample/sampler.h"

namespace rw::cli {

// --model, --threads, --max-context, --prefill-chunk, the expert store's flags, --backend and
// --vram-budget.
void AddEngineFlags(Flags& flags);
Result<EngineOptions> EngineOptionsFromFlags(const Flags& flags);

// --temperature, --top-k, --top-p, --min-p, --repetition-penalty, --seed, --stop, --max-new.
void AddSamplingFlags(Flags& flags);
// The seed is random unless --seed is given (the stats line prints it, so a draw can be
// repeated).
Result<GenerateOptions> GenerateOptionsFromFlags(const Flags& flags);

// --drafter ngram|oracle:P|off and --draft-tokens auto|N (speculative decoding).
void AddSpeculationFlags(Flags& flags);
// The drafter spec and draft count (kDraftTokensAuto for auto, the default); a drafter with
// --draft-tokens 0 is off. `allow_oracle`:
// oracle:P needs a recorded continuation, which only the bench makes.
Status SpeculationFromFlags(const Flags& flags, bool allow_oracle, DrafterSpec* spec,
                            int* draft_tokens);
// The drafter for run, chat and serve once the engine is loaded: ngram, the DFlash drafter of a
// --drafter directory, or, without --drafter, the one installed at <model>/drafter (then
// *draft_tokens becomes auto unless --draft-tokens was given). Null for off. A directory that is
// not a drafter for this model is an error naming it.
Result<std::shared_ptr<Drafter>> DrafterFromFlags(const Flags& flags, const DrafterSpec& spec,
                                                  const Engine& engine,
                                                  const std::string& model_dir, int* draft_tokens);

// --thinking on|off.
Result<bool> ThinkingFromFlags(const Flags& flags);

// "experts: 93.1% resident, 12.3 MB read per token, 0.40 s waiting for reads" over an interval
// ("" when no expert was requested).
std::string ExpertStatsText(const ExpertStoreStats& before, const ExpertStoreStats& after,
                            int64_t tokens);

// One stderr line: prompt/reused tokens, time to first token, prefill and decode rates.
std::string StatsLine(const GenerateResult& r, const GenerateOptions& o);

// All of standard input.
Result<std::string> ReadAllStdin();

}  // namespace rw::cli
