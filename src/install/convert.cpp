#include "install/convert.h"

#include <filesystem>

#include "base/file.h"
#include "base/json.h"
#include "format/model_dir.h"
#include "install/convert_plan.h"
#include "install/convert_repack.h"
#include "install/safetensors.h"

namespace rw {
namespace {

constexpr const char* kCreatedBy = "redwing 0.1.0 convert";
constexpr uint64_t kMaxConfigBytes = 16u << 20;
constexpr uint64_t kCopyChunk = 1u << 20;

std::string AbsoluteNormal(const std::string& p) {
  std::error_code ec;
  std::filesystem::path a = std::filesystem::absolute(p, ec);
  if (ec) return p;
  std::string s = a.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// True when `inner` is `outer` or lies inside it.
bool IsWithin(const std::string& inner, const std::string& outer) {
  return inner == outer ||
         (inner.size() > outer.size() && inner.compare(0, outer.size(), outer) == 0 &&
          inner[outer.size()] == '/');
}

Result<Json> ReadConfig(const std::string& dir) {
  std::string path = JoinPath(dir, "config.json");
  if (!PathExists(path)) return Error(ErrorCode::kNotFound, "{}: no config.json", dir);
  RW_ASSIGN_OR_RETURN(File f, File::OpenRead(path));
  RW_ASSIGN_OR_RETURN(uint64_t size, f.Size());
  if (size > kMaxConfigBytes)
    return Error(ErrorCode::kCorrupt, "{}: {} bytes is too large for a config", path, size);
  std::string text(size, '\0');
  RW_RETURN_IF_ERROR(f.PreadExact(text.data(), size, 0));
  RW_ASSIGN_OR_RETURN(Json j, ParseJson(text, path));
  if (!j.is_object()) return Error(ErrorCode::kCorrupt, "{}: not a JSON object", path);
  return j;
}

// Streams a file into the staging directory (tokenizer.json is tens of MB).
Status CopyFile(const std::string& from, const std::string& to) {
  RW_ASSIGN_OR_RETURN(File in, File::OpenRead(from));
  RW_ASSIGN_OR_RETURN(uint64_t size, in.Size());
  RW_ASSIGN_OR_RETURN(File out, File::Create(to));
  std::vector<uint8_t> buf(std::min<uint64_t>(size, kCopyChunk));
  for (uint64_t off = 0; off < size; off += buf.size()) {
    uint64_t n = std::min<uint64_t>(buf.size(), size - off);
    RW_RETURN_IF_ERROR(in.PreadExact(buf.data(), n, off));
    RW_RETURN_IF_ERROR(out.PwriteAll(buf.data(), n, off));
  }
  RW_RETURN_IF_ERROR(out.Sync());
  return out.Close();
}

}  // namespace

Status ConvertCheckpoint(const ConvertOptions& opts,
                         const std::function<void(const std::string&)>& progress) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  RW_ASSIGN_OR_RETURN(QuantizeMode mode, ParseQuantizeMode(opts.quantize));
  if (opts.source_dir.empty() || opts.out_dir.empty())
    return Error(ErrorCode::kInvalidArgument,
                 "convert needs a source directory and an output directory");
  const std::string src = AbsoluteNormal(opts.source_dir);
  const std::string out = AbsoluteNormal(opts.out_dir);
  if (!IsDirectory(src))
    return Error(ErrorCode::kNotFound, "{}: no such checkpoint directory", src);
  // Replacing the output must never delete the source.
  if (IsWithin(src, out))
    return Error(ErrorCode::kInvalidArgument, "output {} would contain or replace the source {}",
                 out, src);
  if (PathExists(out) && !opts.overwrite)
    return Error(ErrorCode::kAlreadyExists, "{} already exists; remove it or pass --force", out);

  // Everything structural is checked before the first byte is staged.
  RW_ASSIGN_OR_RETURN(Json config, ReadConfig(src));
  RW_ASSIGN_OR_RETURN(SafetensorsCheckpoint ck, SafetensorsCheckpoint::Open(src));
  RW_ASSIGN_OR_RETURN(ConvertPlan plan, PlanConversion(config, ListSourceTensors(ck), mode, src));
  int quantized = 0;
  for (const TensorPlan& p : plan.core) quantized += p.target.type == TensorType::kAffine;
  say(fmt::format("source: {} checkpoint, {}, {} tensors in {} file(s), {:.2f} GB to read",
                  SourceKindName(plan.kind), plan.source_dtype, ck.num_tensors(), ck.num_files(),
                  plan.source_bytes / 1e9));
  say(
      fmt::format("plan: {} layers, {} core tensors ({} affine), {} expert layers x {} experts, "
                  "--quantize {}",
                  plan.config.num_layers, plan.core.size(), quantized, plan.experts.size(),
                  plan.config.num_experts, QuantizeModeName(mode)));
  for (const std::string& n : plan.notes) say("note: " + n);
  for (const Json& s : plan.skipped)
    say(fmt::format("skipping {} tensor(s) under {}: {}", s["tensors"].get<int>(),
                    s["prefix"].get<std::string>(), s["reason"].get<std::string>()));

  const uint64_t need = PlannedOutputBytes(plan);
  auto free_bytes = FreeDiskBytes(ParentPath(out));
  if (free_bytes.ok() && *free_bytes < need)
    return Error(ErrorCode::kResourceExhausted, "{}: needs {:.2f} GB, only {:.2f} GB free", out,
                 need / 1e9, *free_bytes / 1e9);

  RW_ASSIGN_OR_RETURN(ModelDirWriter writer, ModelDirWriter::Create(out, opts.overwrite));
  CheckpointReader reader(ck);
  RW_RETURN_IF_ERROR(WritePlannedTensors(plan, reader, writer, progress));
  for (const std::string& name : SideFileNames()) {
    std::string from = JoinPath(src, name);
    if (PathExists(from)) RW_RETURN_IF_ERROR(CopyFile(from, writer.Path(name)));
  }

  Manifest m;
  m.created_by = kCreatedBy;
  m.config = plan.config;
  m.source = Json{{"kind", SourceKindName(plan.kind)},
                  {"path", src},
                  {"dtype", plan.source_dtype},
                  {"quantize", QuantizeModeName(mode)}};
  if (!opts.repo_id.empty()) m.source["repo_id"] = opts.repo_id;
  if (!opts.revision.empty()) m.source["revision"] = opts.revision;
  if (!plan.mlx_quantization.is_null()) m.source["mlx_quantization"] = plan.mlx_quantization;
  m.skipped = plan.skipped;
  Json def{{"mode", QuantizeModeName(mode)}};
  if (mode == QuantizeMode::kQ4 || mode == QuantizeMode::kQ8)
    def.update(
        Json{{"type", "affine"}, {"bits", mode == QuantizeMode::kQ4 ? 4 : 8}, {"group_size", 64}});
  m.quantization["default"] = def;
  RW_RETURN_IF_ERROR(writer.Commit(std::move(m), progress));
  say(fmt::format("wrote {}", out));
  return Status::Ok();
}

}  // namespace rw
