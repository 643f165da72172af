#include "install/drafter_convert.h"

#include <filesystem>

#include <fmt/format.h>

#include "base/bf16.h"
#include "base/file.h"
#include "base/hash.h"
#include "draft/dflash_config.h"
#include "draft/dflash_model.h"
#include "format/core_file.h"
#include "install/quantize.h"
#include "install/safetensors.h"

namespace rw {

namespace {

constexpr int kGroup = 64;

// The checkpoint's key of a drafter tensor: "<name>.weight", with or without a "model." prefix.
SafetensorsCheckpoint::Entry FindTensor(const SafetensorsCheckpoint& ck, const std::string& name) {
  for (const std::string& key : {name + ".weight", "model." + name + ".weight"}) {
    SafetensorsCheckpoint::Entry e = ck.Find(key);
    if (e.tensor != nullptr) return e;
  }
  return {};
}

// The tensor's values as bf16 (what every published drafter holds; f32 is rounded).
Result<std::vector<uint16_t>> ReadBf16(const SafetensorsCheckpoint::Entry& e) {
  const StTensor& t = *e.tensor;
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  if (t.dtype == StDType::kBF16) {
    RW_RETURN_IF_ERROR(e.file->Read(t, out.data()));
  } else if (t.dtype == StDType::kF32) {
    std::vector<float> f(out.size());
    RW_RETURN_IF_ERROR(e.file->Read(t, f.data()));
    for (size_t i = 0; i < f.size(); ++i) out[i] = F32ToBf16(f[i]);
  } else {
    return Error(ErrorCode::kUnsupported, "drafter tensor {} has dtype {} (bf16 or f32 expected)",
                 t.name, StDTypeName(t.dtype));
  }
  return out;
}

Status WriteCore(const DFlashConfig& c, const SafetensorsCheckpoint& ck, const std::string& path,
                 int bits) {
  RW_ASSIGN_OR_RETURN(CoreWriter w, CoreWriter::Create(path));
  for (const DFlashTensorName& t : DFlashTensorNames(c)) {
    const SafetensorsCheckpoint::Entry e = FindTensor(ck, t.name);
    if (e.tensor == nullptr)
      return Error(ErrorCode::kNotFound, "{}: the drafter checkpoint has no tensor {}.weight",
                   ck.dir(), t.name);
    if (e.tensor->shape != t.shape)
      return Error(ErrorCode::kCorrupt, "{}: {}.weight has shape [{}], the config implies [{}]",
                   ck.dir(), t.name, fmt::join(e.tensor->shape, ", "), fmt::join(t.shape, ", "));
    RW_ASSIGN_OR_RETURN(std::vector<uint16_t> v, ReadBf16(e));
    TensorDesc d;
    d.name = t.name;
    d.shape = t.shape;
    const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1, cols = t.shape.back();
    // Quantized where the group divides the row (every real drafter matrix); else as published.
    if (t.linear && bits > 0 && cols % kGroup == 0) {
      d.type = TensorType::kAffine;
      d.bits = bits;
      d.group_size = kGroup;
      std::vector<uint32_t> q(static_cast<size_t>(rows * AffinePackedCols(cols, bits)));
      std::vector<uint16_t> s(static_cast<size_t>(rows * AffineGroups(cols, kGroup))), b(s.size());
      RW_RETURN_IF_ERROR(
          QuantizeAffineBf16(v.data(), rows, cols, bits, kGroup, q.data(), s.data(), b.data()));
      RW_RETURN_IF_ERROR(w.Add(d, q.data(), s.data(), b.data()));
    } else {
      d.type = TensorType::kBf16;
      RW_RETURN_IF_ERROR(w.Add(d, v.data()));
    }
  }
  return w.Finish();
}

}  // namespace

Status ConvertDrafter(const DrafterConvertOptions& o) {
  int bits = 0;
  if (o.quantize == "q4")
    bits = 4;
  else if (o.quantize == "q8")
    bits = 8;
  else if (o.quantize != "keep")
    return Error(ErrorCode::kInvalidArgument,
                 "drafter quantization must be q4, q8 or keep, not '{}'", o.quantize);
  if (o.out_dir.empty()) return Error(ErrorCode::kInvalidArgument, "no output directory");
  if (PathExists(o.out_dir) && !o.overwrite)
    return Error(ErrorCode::kAlreadyExists, "{} exists (pass --force to replace it)", o.out_dir);

  const std::string config_path = JoinPath(o.source_dir, "config.json");
  RW_ASSIGN_OR_RETURN(std::string config_text, ReadFileToString(config_path, 4 << 20));
  RW_ASSIGN_OR_RETURN(Json cj, ParseJson(config_text, config_path));
  RW_ASSIGN_OR_RETURN(DFlashConfig config, DFlashConfig::FromHf(cj));
  RW_ASSIGN_OR_RETURN(SafetensorsCheckpoint ck, SafetensorsCheckpoint::Open(o.source_dir));

  const std::string staging = o.out_dir + ".partial";
  RW_RETURN_IF_ERROR(RemoveAll(staging));
  RW_RETURN_IF_ERROR(MakeDirectories(staging));
  Status st = [&]() -> Status {
    RW_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(staging, "config.json"), config_text));
    RW_RETURN_IF_ERROR(WriteCore(config, ck, JoinPath(staging, "core.bin"), bits));
    Json m;
    m["format"] = kDrafterFormat;
    m["format_version"] = 1;
    m["created_by"] = "redwing";
    m["quantize"] = o.quantize;
    m["source"] = o.source;
    m["parameters"] = config.Parameters();
    Json files = Json::object();
    for (const char* f : {"config.json", "core.bin"}) {
      const std::string p = JoinPath(staging, f);
      RW_ASSIGN_OR_RETURN(std::string sha, Sha256File(p));
      files[f] = {{"size", std::filesystem::file_size(p)}, {"sha256", sha}};
    }
    m["files"] = files;
    RW_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(staging, kDrafterManifest), m.dump(2) + "\n"));
    return SyncDirectory(staging);
  }();
  if (!st.ok()) {
    (void)RemoveAll(staging);
    return st;
  }
  if (PathExists(o.out_dir)) RW_RETURN_IF_ERROR(RemoveAll(o.out_dir));
  std::error_code ec;
  std::filesystem::rename(staging, o.out_dir, ec);
  if (ec)
    return Error(ErrorCode::kIo, "cannot rename {} to {}: {}", staging, o.out_dir, ec.message());
  return SyncDirectory(ParentPath(o.out_dir).empty() ? "." : ParentPath(o.out_dir));
}

}  // namespace rw
