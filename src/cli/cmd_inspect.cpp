// redwing inspect <model-dir>: geometry, sizes per part, quantization and source of a model.
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "cli/flags.h"
#include "format/model_dir.h"

namespace rw::cli {
namespace {

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.2f} {}", b, units[u]);
}

int Inspect(const Args& args) {
  Flags flags("inspect", "redwing inspect <model-dir> [--json]",
              "Shows a model directory's geometry, sizes, quantization and source.");
  flags.Positional("model-dir", "a redwing model directory");
  flags.Bool("json", "print the manifest's config and sizes as JSON");
  if (Status st = flags.Parse(args); !st.ok()) return ReportError("inspect", st);
  if (flags.help_requested()) {
    std::fputs(flags.HelpText().c_str(), stdout);
    return 0;
  }
  auto dir = ModelDir::Open(flags.positional(0));
  if (!dir.ok()) return ReportError("inspect", dir.status());
  const Manifest& m = dir->manifest();
  const ModelConfig& c = m.config;

  uint64_t core_bytes = dir->core().size(), expert_bytes = 0, per_expert = 0;
  if (const ExpertIndex* idx = dir->experts()) {
    for (const ExpertLayerInfo& l : idx->layers) expert_bytes += l.layout.stride * idx->num_experts;
    per_expert = idx->layers.empty() ? 0 : idx->layers[0].layout.stride;
  }
  std::map<std::string, int> quant_counts;
  if (m.quantization.contains("tensors")) {
    for (auto& [name, q] : m.quantization["tensors"].items()) {
      std::string key = q.value("type", "?");
      if (key == "affine")
        key = fmt::format("affine {}-bit g{}", q.value("bits", 0), q.value("group_size", 0));
      quant_counts[key]++;
    }
  }
  if (flags.GetBool("json")) {
    Json out{
        {"config", c.ToJson()},
        {"source", m.source},
        {"sizes", {{"core", core_bytes}, {"experts", expert_bytes}, {"per_expert", per_expert}}},
        {"quantization", quant_counts},
        {"skipped", m.skipped}};
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  int n_full = 0;
  for (int l = 0; l < c.num_layers; ++l) n_full += c.is_full(l);
  std::printf("model       %s\n", dir->path().c_str());
  std::printf("format      redwing-model v%d (%s)\n", m.format_version, m.created_by.c_str());
  std::printf("arch        %s: %d layers (%d sliding, %d full), hidden %d, vocab %d\n",
              c.architecture.c_str(), c.num_layers, c.num_layers - n_full, n_full, c.hidden_size,
              c.vocab_size);
  std::printf(
      "attention   %d query heads; sliding: %d KV heads x %d, window %d, RoPE %g; "
      "full: %d KV heads x %d%s, RoPE %s %g (partial %g)\n",
      c.num_heads, c.sliding.num_kv_heads, c.sliding.head_dim, c.sliding_window,
      c.sliding.rope_theta, c.full.num_kv_heads, c.full.head_dim, c.full.k_eq_v ? ", K=V" : "",
      c.full.rope_type.c_str(), c.full.rope_theta, c.full.partial_rotary_factor);
  std::printf("mlp         dense GeGLU %d", c.intermediate_size);
  if (c.enable_moe)
    std::printf("; MoE %d experts of %d, top-%d", c.num_experts, c.moe_intermediate_size, c.top_k);
  std::printf("\nhead        tied embedding, final softcap %g, embedding scale %g\n",
              c.final_logit_softcapping, static_cast<double>(c.embed_scale));
  std::printf("sizes       core %s, experts %s (%s per expert), total %s\n",
              HumanBytes(core_bytes).c_str(), HumanBytes(expert_bytes).c_str(),
              HumanBytes(per_expert).c_str(), HumanBytes(core_bytes + expert_bytes).c_str());
  std::printf("quantization");
  const char* sep = " ";
  for (auto& [k, n] : quant_counts) {
    std::printf("%s%d x %s", sep, n, k.c_str());
    sep = ", ";
  }
  std::printf("\nsource      %s\n", m.source.dump().c_str());
  for (const Json& s : m.skipped) std::printf("skipped     %s\n", s.dump().c_str());
  return 0;
}

}  // namespace
REDWING_COMMAND("inspect", "show a model directory's geometry, sizes, quantization, source",
                Inspect);
}  // namespace rw::cli
