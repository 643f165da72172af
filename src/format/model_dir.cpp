#include "format/model_dir.h"

#include <unistd.h>

#include <filesystem>

#include "base/hash.h"
#include "base/log.h"

namespace rw {

const std::vector<std::string>& SideFileNames() {
  static const std::vector<std::string> kNames = {"tokenizer.json", "tokenizer_config.json",
                                                  "chat_template.jinja", "generation_config.json",
                                                  "special_tokens_map.json"};
  return kNames;
}

Json Manifest::ToJson() const {
  Json files_j = Json::object();
  for (const auto& [name, f] : files) files_j[name] = Json{{"size", f.size}, {"sha256", f.sha256}};
  return Json{{"format", "redwing-model"},
              {"format_version", format_version},
              {"created_by", created_by},
              {"config", config.ToJson()},
              {"quantization", quantization},
              {"source", source},
              {"skipped", skipped},
              {"core", kCoreName},
              {"experts", has_experts ? Json(kExpertIndexName) : Json(nullptr)},
              {"files", files_j}};
}

Result<Manifest> Manifest::FromJson(const Json& j, const std::string& what) {
  Manifest m;
  RW_ASSIGN_OR_RETURN(std::string format, JsonString(j, "format", what));
  if (format != "redwing-model")
    return Error(ErrorCode::kCorrupt, "{}: not a redwing manifest (format '{}')", what, format);
  RW_ASSIGN_OR_RETURN(int64_t version, JsonInt(j, "format_version", what));
  if (version != kFormatVersion)
    return Error(ErrorCode::kUnsupported, "{}: format version {} (this build reads {})", what,
                 version, kFormatVersion);
  m.format_version = static_cast<int>(version);
  if (auto cb = j.find("created_by"); cb != j.end()) {
    if (!cb->is_string())  // (Json::value() would throw here)
      return Error(ErrorCode::kCorrupt, "{}: field 'created_by' must be a string", what);
    m.created_by = cb->get<std::string>();
  }
  if (!j.contains("config")) return Error(ErrorCode::kCorrupt, "{}: field 'config' missing", what);
  RW_ASSIGN_OR_RETURN(m.config, ModelConfig::FromJson(j["config"], what + ": config"));
  m.source = j.value("source", Json::object());
  m.skipped = j.value("skipped", Json::array());
  m.quantization = j.value("quantization", Json::object());
  m.has_experts = j.contains("experts") && j["experts"].is_string();
  if (!j.contains("files") || !j["files"].is_object())
    return Error(ErrorCode::kCorrupt, "{}: field 'files' missing", what);
  for (auto it = j["files"].begin(); it != j["files"].end(); ++it) {
    const std::string& name = it.key();
    if (name.empty() || name[0] == '/' || name.find("..") != std::string::npos)
      return Error(ErrorCode::kCorrupt, "{}: file name '{}' leaves the model directory", what,
                   name);
    FileEntry f;
    auto size = it->find("size");
    if (size == it->end() || !size->is_number_unsigned())
      return Error(ErrorCode::kCorrupt, "{}: file '{}' has no size", what, name);
    f.size = size->get<uint64_t>();
    RW_ASSIGN_OR_RETURN(f.sha256, JsonString(*it, "sha256", what + ": file '" + name + "'"));
    if (f.sha256.size() != 64)
      return Error(ErrorCode::kCorrupt, "{}: file '{}' has a malformed sha256", what, name);
    m.files[name] = f;
  }
  if (!m.files.count(kCoreName))
    return Error(ErrorCode::kCorrupt, "{}: core.bin is not listed", what);
  if (m.has_experts && !m.files.count(kExpertIndexName))
    return Error(ErrorCode::kCorrupt, "{}: {} is not listed", what, kExpertIndexName);
  return m;
}

// ---- writer ----

Result<ModelDirWriter> ModelDirWriter::Create(const std::string& out_dir, bool overwrite) {
  std::string out = out_dir;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  if (PathExists(out) && !overwrite)
    return Error(ErrorCode::kAlreadyExists, "{} already exists; remove it or pass --force", out);
  ModelDirWriter w;
  w.out_ = out;
  w.overwrite_ = overwrite;
  w.staging_ = out + ".partial";
  // A stale staging directory is an earlier interrupted write of ours: start over.
  RW_RETURN_IF_ERROR(RemoveAll(w.staging_));
  RW_RETURN_IF_ERROR(MakeDirectories(JoinPath(w.staging_, "experts")));
  return w;
}

ModelDirWriter::~ModelDirWriter() {
  if (!committed_ && !staging_.empty()) (void)RemoveAll(staging_);
}

Status ModelDirWriter::Commit(Manifest manifest,
                              const std::function<void(const std::string&)>& progress) {
  namespace fs = std::filesystem;
  manifest.files.clear();
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(staging_, ec);
       it != fs::recursive_directory_iterator(); ++it) {
    if (!it->is_regular_file()) continue;
    std::string rel = fs::relative(it->path(), staging_).string();
    if (rel == kManifestName) continue;
    if (progress) progress("hashing " + rel);
    RW_ASSIGN_OR_RETURN(std::string sha, Sha256File(it->path().string()));
    manifest.files[rel] = FileEntry{static_cast<uint64_t>(it->file_size()), sha};
  }
  if (ec) return Error(ErrorCode::kIo, "{}: cannot list: {}", staging_, ec.message());
  manifest.has_experts = manifest.files.count(kExpertIndexName) > 0;

  // Quantization summary from what was actually written.
  RW_ASSIGN_OR_RETURN(CoreFile core, CoreFile::Open(Path(kCoreName)));
  Json tensors = Json::object();
  auto describe = [](const TensorDesc& t) {
    Json q{{"type", TensorTypeName(t.type)}};
    if (t.type == TensorType::kAffine) {
      q["bits"] = t.bits;
      q["group_size"] = t.group_size;
    }
    return q;
  };
  for (const TensorDesc& t : core.tensors()) tensors[t.name] = describe(t);
  if (manifest.has_experts) {
    RW_ASSIGN_OR_RETURN(std::string text,
                        ReadFileToString(Path(kExpertIndexName), kMaxExpertIndexBytes));
    RW_ASSIGN_OR_RETURN(Json ij, ParseJson(text, kExpertIndexName));
    RW_ASSIGN_OR_RETURN(ExpertIndex idx, ExpertIndex::FromJson(ij, kExpertIndexName));
    for (int l = 0; l < idx.num_layers; ++l)
      for (const TensorDesc* t :
           {&idx.layers[l].layout.gate, &idx.layers[l].layout.up, &idx.layers[l].layout.down})
        tensors[fmt::format("layers.{}.experts.{}", l, t->name)] = describe(*t);
  }
  manifest.quantization["tensors"] = tensors;

  RW_RETURN_IF_ERROR(WriteFileAtomic(Path(kManifestName), manifest.ToJson().dump(2) + "\n"));
  RW_RETURN_IF_ERROR(SyncDirectory(staging_));
  std::string old;
  if (PathExists(out_)) {
    if (!overwrite_)
      return Error(ErrorCode::kAlreadyExists, "{} appeared while writing; not replacing it", out_);
    old = fmt::format("{}.old-{}", out_, ::getpid());
    if (::rename(out_.c_str(), old.c_str()) != 0)
      return Error(ErrorCode::kIo, "cannot move {} aside", out_);
  }
  if (::rename(staging_.c_str(), out_.c_str()) != 0) {
    if (!old.empty()) (void)::rename(old.c_str(), out_.c_str());
    return Error(ErrorCode::kIo, "cannot rename {} to {}", staging_, out_);
  }
  committed_ = true;
  RW_RETURN_IF_ERROR(SyncDirectory(ParentPath(out_)));
  if (!old.empty()) RW_RETURN_IF_ERROR(RemoveAll(old));
  return Status::Ok();
}

// ---- reader ----

Result<ModelDir> ModelDir::Open(const std::string& dir) {
  ModelDir m;
  m.path_ = dir;
  if (!IsDirectory(dir)) return Error(ErrorCode::kNotFound, "{}: no such model directory", dir);
  std::string mpath = JoinPath(dir, kManifestName);
  if (!PathExists(mpath)) {
    if (PathExists(dir + ".partial") || PathExists(JoinPath(dir, "experts")))
      return Error(ErrorCode::kCorrupt,
                   "{}: no manifest.json: the directory is incomplete (an interrupted write?)",
                   dir);
    return Error(ErrorCode::kNotFound, "{}: no manifest.json: not a redwing model directory", dir);
  }
  RW_ASSIGN_OR_RETURN(m.manifest_, ReadManifest(dir));
  // Cheap integrity: every listed file exists with its recorded size.
  for (const auto& [name, f] : m.manifest_.files) {
    std::string p = JoinPath(dir, name);
    std::error_code ec;
    uint64_t size = std::filesystem::file_size(p, ec);
    if (ec) return Error(ErrorCode::kCorrupt, "{}: listed file {} is missing", dir, name);
    if (size != f.size)
      return Error(ErrorCode::kCorrupt, "{}: {} has {} bytes, the manifest says {}", dir, name,
                   size, f.size);
  }
  RW_ASSIGN_OR_RETURN(m.core_, CoreFile::Open(JoinPath(dir, kCoreName)));
  if (m.manifest_.has_experts) {
    std::string ipath = JoinPath(dir, kExpertIndexName);
    if (!m.manifest_.config.enable_moe)
      return Error(ErrorCode::kCorrupt,
                   "{}: the model has an expert index but its config has enable_moe false", mpath);
    RW_ASSIGN_OR_RETURN(std::string itext, ReadFileToString(ipath, kMaxExpertIndexBytes));
    RW_ASSIGN_OR_RETURN(Json ij, ParseJson(itext, ipath));
    RW_ASSIGN_OR_RETURN(ExpertIndex idx, ExpertIndex::FromJson(ij, ipath));
    const ModelConfig& c = m.manifest_.config;
    if (idx.num_layers != c.num_layers || idx.num_experts != c.num_experts)
      return Error(ErrorCode::kCorrupt,
                   "{}: expert index has {} layers × {} experts, config says {} × {}", ipath,
                   idx.num_layers, idx.num_experts, c.num_layers, c.num_experts);
    for (int l = 0; l < idx.num_layers; ++l) {
      const ExpertLayerInfo& info = idx.layers[l];
      auto f = m.manifest_.files.find(info.file);
      if (f == m.manifest_.files.end())
        return Error(ErrorCode::kCorrupt, "{}: {} is not in the manifest", ipath, info.file);
      // Divided, not multiplied: a hostile stride must not wrap around to the file's size.
      if (f->second.size % static_cast<uint64_t>(idx.num_experts) != 0 ||
          f->second.size / static_cast<uint64_t>(idx.num_experts) != info.layout.stride)
        return Error(ErrorCode::kCorrupt, "{}: {} has {} bytes, {} experts × stride {} expected",
                     ipath, info.file, f->second.size, idx.num_experts, info.layout.stride);
      const TensorDesc& g = info.layout.gate;
      if (g.shape[0] != c.moe_intermediate_size || g.shape[1] != c.hidden_size)
        return Error(ErrorCode::kCorrupt,
                     "{}: layer {} expert shape [{}, {}] does not match the config", ipath, l,
                     g.shape[0], g.shape[1]);
    }
    m.experts_ = std::move(idx);
  } else if (m.manifest_.config.enable_moe) {
    return Error(ErrorCode::kCorrupt, "{}: the config enables MoE but there is no expert index",
                 mpath);
  }
  return m;
}

Result<Manifest> ReadManifest(const std::string& dir) {
  const std::string mpath = JoinPath(dir, kManifestName);
  RW_ASSIGN_OR_RETURN(std::string text, ReadFileToString(mpath, kMaxManifestBytes));
  RW_ASSIGN_OR_RETURN(Json j, ParseJson(text, mpath));
  return Manifest::FromJson(j, mpath);
}

Result<VerifyReport> VerifyModelDir(const std::string& dir,
                                    const std::function<void(const std::string&)>& progress,
                                    const std::function<Status(const std::string&)>& open_check) {
  VerifyReport report;
  RW_ASSIGN_OR_RETURN(Manifest m, ReadManifest(dir));
  if (progress) progress("opening the model");
  Status opened = open_check ? open_check(dir) : ModelDir::Open(dir).status();
  if (!opened.ok()) report.problems.push_back("the model does not open: " + opened.message());
  for (const auto& [name, f] : m.files) {
    if (progress) progress("checking " + name);
    std::string p = JoinPath(dir, name);
    auto sha = Sha256File(p);
    if (!sha.ok()) {
      report.problems.push_back(fmt::format("{}: {}", name, sha.status().message()));
      continue;
    }
    std::error_code ec;
    uint64_t size = std::filesystem::file_size(p, ec);
    report.bytes_checked += size;
    if (size != f.size)
      report.problems.push_back(fmt::format("{}: {} bytes, expected {}", name, size, f.size));
    else if (*sha != f.sha256)
      report.problems.push_back(fmt::format("{}: SHA-256 mismatch", name));
  }
  if (!opened.ok() || !m.has_experts) return report;
  // Name the damaged expert blobs too, so a user knows what a bad read would hit. The index comes
  // from an opened model: its strides match the layer files, so buffers are sized by real files.
  auto md = ModelDir::Open(dir);
  if (!md.ok()) {
    report.problems.push_back("the model does not open: " + md.status().message());
    return report;
  }
  const ExpertIndex* idx = md->experts();
  if (idx == nullptr) return report;
  std::vector<uint8_t> buf;
  for (const ExpertLayerInfo& l : idx->layers) {
    auto f = File::OpenRead(JoinPath(dir, l.file));
    if (!f.ok()) continue;  // already reported
    buf.resize(l.layout.stride);
    for (int e = 0; e < idx->num_experts; ++e) {
      Status st = f->PreadExact(buf.data(), buf.size(), l.layout.stride * static_cast<uint64_t>(e));
      if (!st.ok()) {
        report.problems.push_back(fmt::format("{}: expert {}: {}", l.file, e, st.message()));
        break;
      }
      if (Xxh3_64(buf.data(), buf.size()) != l.xxh3[e])
        report.problems.push_back(fmt::format("{}: expert {} blob checksum mismatch", l.file, e));
    }
  }
  return report;
}

}  // namespace rw
