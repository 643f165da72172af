#include "format/core_file.h"

#include <cstring>

namespace rw {
namespace {
struct Header {
  char magic[8];
  uint64_t dir_offset;
  uint64_t dir_size;
  uint64_t data_end;
};
static_assert(sizeof(Header) == 32);
}  // namespace

Result<CoreWriter> CoreWriter::Create(const std::string& path) {
  CoreWriter w;
  RW_ASSIGN_OR_RETURN(w.file_, File::Create(path));
  // Reserve the header page as zeros: an unfinished file has no magic.
  std::vector<uint8_t> zeros(kCoreAlignment, 0);
  RW_RETURN_IF_ERROR(w.file_.PwriteAll(zeros.data(), zeros.size(), 0));
  return w;
}

Status CoreWriter::AppendPart(const void* p, uint64_t n, ByteRange* out) {
  out->offset = end_;
  out->size = n;
  if (n > 0) RW_RETURN_IF_ERROR(file_.PwriteAll(p, n, end_));
  end_ = AlignUp(end_ + n, kCoreAlignment);
  return Status::Ok();
}

ByteRange CoreWriter::ReservePart(uint64_t n) {
  ByteRange r{end_, n};
  end_ = AlignUp(end_ + n, kCoreAlignment);
  return r;
}

Result<TensorDesc> CoreWriter::Reserve(TensorDesc desc) {
  if (names_.count(desc.name))
    return Error(ErrorCode::kInvalidArgument, "core: duplicate tensor '{}'", desc.name);
  desc.data = ReservePart(desc.ExpectedDataBytes());
  if (desc.type == TensorType::kAffine) {
    desc.scales = ReservePart(desc.ExpectedScaleBytes());
    desc.biases = ReservePart(desc.ExpectedScaleBytes());
  }
  names_[desc.name] = tensors_.size();
  tensors_.push_back(desc);
  return desc;
}

Status CoreWriter::WriteAt(uint64_t offset, const void* data, size_t n) {
  if (offset < kCoreAlignment || offset + n > end_)
    return Error(ErrorCode::kInvalidArgument, "core: write [{}, +{}) outside the reserved data",
                 offset, n);
  return file_.PwriteAll(data, n, offset);
}

Status CoreWriter::Add(TensorDesc desc, const void* data, const void* scales, const void* biases) {
  if (names_.count(desc.name))
    return Error(ErrorCode::kInvalidArgument, "core: duplicate tensor '{}'", desc.name);
  RW_RETURN_IF_ERROR(AppendPart(data, desc.ExpectedDataBytes(), &desc.data));
  if (desc.type == TensorType::kAffine) {
    if (scales == nullptr || biases == nullptr)
      return Error(ErrorCode::kInvalidArgument, "core: affine tensor '{}' needs scales and biases",
                   desc.name);
    RW_RETURN_IF_ERROR(AppendPart(scales, desc.ExpectedScaleBytes(), &desc.scales));
    RW_RETURN_IF_ERROR(AppendPart(biases, desc.ExpectedScaleBytes(), &desc.biases));
  }
  names_[desc.name] = tensors_.size();
  tensors_.push_back(std::move(desc));
  return Status::Ok();
}

Status CoreWriter::Finish() {
  Json dir{{"version", 1}, {"alignment", kCoreAlignment}, {"tensors", Json::array()}};
  for (const TensorDesc& t : tensors_) dir["tensors"].push_back(t.ToJson());
  std::string text = dir.dump();
  Header h{};
  std::memcpy(h.magic, kCoreMagic, 8);
  h.dir_offset = end_;
  h.dir_size = text.size();
  h.data_end = end_;
  RW_RETURN_IF_ERROR(file_.PwriteAll(text.data(), text.size(), end_));
  RW_RETURN_IF_ERROR(file_.Truncate(end_ + text.size()));
  RW_RETURN_IF_ERROR(file_.Sync());
  RW_RETURN_IF_ERROR(file_.PwriteAll(&h, sizeof h, 0));
  RW_RETURN_IF_ERROR(file_.Sync());
  return file_.Close();
}

Result<CoreFile> CoreFile::Open(const std::string& path) {
  CoreFile c;
  RW_ASSIGN_OR_RETURN(c.map_, MappedFile::Open(path));
  if (c.map_.size() < kCoreAlignment)
    return Error(ErrorCode::kCorrupt, "{}: too short for a core file ({} bytes)", path,
                 c.map_.size());
  Header h;
  std::memcpy(&h, c.map_.data(), sizeof h);
  if (std::memcmp(h.magic, kCoreMagic, 8) != 0)
    return Error(ErrorCode::kCorrupt,
                 "{}: not a redwing core file (bad magic; an unfinished write?)", path);
  if (h.dir_offset > c.map_.size() || h.dir_size > c.map_.size() - h.dir_offset ||
      h.dir_offset < kCoreAlignment)
    return Error(ErrorCode::kCorrupt, "{}: tensor directory [{}, +{}) outside the file", path,
                 h.dir_offset, h.dir_size);
  std::string text(reinterpret_cast<const char*>(c.map_.data() + h.dir_offset), h.dir_size);
  RW_ASSIGN_OR_RETURN(Json dir, ParseJson(text, path + ": tensor directory"));
  if (!dir.is_object() || !dir.contains("tensors") || !dir["tensors"].is_array())
    return Error(ErrorCode::kCorrupt, "{}: tensor directory has no 'tensors' array", path);
  if (dir.value("version", 0) != 1)
    return Error(ErrorCode::kUnsupported, "{}: core directory version {} (this build reads 1)",
                 path, dir.value("version", 0));
  std::vector<ByteRange> seen;
  for (const Json& tj : dir["tensors"]) {
    RW_ASSIGN_OR_RETURN(TensorDesc t, TensorDesc::FromJson(tj, path));
    RW_RETURN_IF_ERROR(t.Validate(h.dir_offset, path));
    if (c.names_.count(t.name))
      return Error(ErrorCode::kCorrupt, "{}: duplicate tensor '{}'", path, t.name);
    c.names_[t.name] = c.tensors_.size();
    c.tensors_.push_back(std::move(t));
  }
  return c;
}

const TensorDesc* CoreFile::Find(const std::string& name) const {
  auto it = names_.find(name);
  return it == names_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace rw
