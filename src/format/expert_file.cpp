#include "format/expert_file.h"

#include <algorithm>

#include "base/hash.h"

namespace rw {

ExpertLayout ExpertLayout::Make(TensorDesc gate, TensorDesc up, TensorDesc down) {
  ExpertLayout l;
  uint64_t off = 0;
  auto place = [&](ByteRange* r, uint64_t n) {
    r->offset = off;
    r->size = n;
    off = AlignUp(off + n, kExpertPartAlignment);
  };
  for (TensorDesc* t : {&gate, &up, &down}) {
    place(&t->data, t->ExpectedDataBytes());
    if (t->type == TensorType::kAffine) {
      place(&t->scales, t->ExpectedScaleBytes());
      place(&t->biases, t->ExpectedScaleBytes());
    }
  }
  l.gate = std::move(gate);
  l.up = std::move(up);
  l.down = std::move(down);
  l.blob_size = off;
  l.stride = AlignUp(off, kExpertAlignment);
  return l;
}

Json ExpertLayout::ToJson() const {
  return Json{{"gate", gate.ToJson()},
              {"up", up.ToJson()},
              {"down", down.ToJson()},
              {"blob_size", blob_size},
              {"stride", stride}};
}

Result<ExpertLayout> ExpertLayout::FromJson(const Json& j, const std::string& what) {
  ExpertLayout l;
  for (auto [key, t] :
       {std::pair{"gate", &l.gate}, std::pair{"up", &l.up}, std::pair{"down", &l.down}}) {
    if (!j.contains(key))
      return Error(ErrorCode::kCorrupt, "{}: blob layout lacks '{}'", what, key);
    RW_ASSIGN_OR_RETURN(*t, TensorDesc::FromJson(j[key], what));
  }
  auto bs = j.find("blob_size");
  auto st = j.find("stride");
  if (bs == j.end() || st == j.end() || !bs->is_number_unsigned() || !st->is_number_unsigned())
    return Error(ErrorCode::kCorrupt, "{}: blob layout needs blob_size and stride", what);
  l.blob_size = bs->get<uint64_t>();
  l.stride = st->get<uint64_t>();
  RW_RETURN_IF_ERROR(l.Validate(what));
  return l;
}

Status ExpertLayout::Validate(const std::string& what) const {
  if (stride == 0 || stride % kExpertAlignment != 0 || blob_size > stride)
    return Error(ErrorCode::kCorrupt,
                 "{}: expert stride {} must be a positive multiple of {} holding {} bytes", what,
                 stride, kExpertAlignment, blob_size);
  std::vector<ByteRange> parts;
  uint64_t used = 0;
  for (const TensorDesc* t : {&gate, &up, &down}) {
    RW_RETURN_IF_ERROR(t->Validate(blob_size, what));
    if (t->shape.size() != 2)
      return Error(ErrorCode::kCorrupt, "{}: expert tensor '{}' must be 2-D", what, t->name);
    parts.push_back(t->data);
    if (t->type == TensorType::kAffine) {
      parts.push_back(t->scales);
      parts.push_back(t->biases);
    }
  }
  for (const ByteRange& r : parts) used = std::max(used, r.end());
  // Make() is the only layout there is: the blob ends at its last part (64-byte aligned), the
  // stride at the next 4 KiB. Anything larger is padding no writer makes, and readers would size
  // their buffers by it.
  if (blob_size != AlignUp(used, kExpertPartAlignment) ||
      stride != AlignUp(blob_size, kExpertAlignment))
    return Error(ErrorCode::kCorrupt,
                 "{}: expert blob_size {} and stride {} do not fit its parts ({} bytes: expected "
                 "{} and {})",
                 what, blob_size, stride, used, AlignUp(used, kExpertPartAlignment),
                 AlignUp(AlignUp(used, kExpertPartAlignment), kExpertAlignment));
  for (size_t i = 0; i < parts.size(); ++i)
    for (size_t k = i + 1; k < parts.size(); ++k)
      if (parts[i].offset < parts[k].end() && parts[k].offset < parts[i].end())
        return Error(ErrorCode::kCorrupt, "{}: expert blob parts overlap", what);
  if (gate.shape != up.shape || down.shape[0] != gate.shape[1] || down.shape[1] != gate.shape[0])
    return Error(ErrorCode::kCorrupt, "{}: expert gate/up/down shapes disagree", what);
  return Status::Ok();
}

bool ExpertLayout::SameShapeAs(const ExpertLayout& o) const {
  return gate.shape == o.gate.shape && down.shape == o.down.shape;
}

Json ExpertIndex::ToJson() const {
  Json layers_j = Json::array();
  for (const ExpertLayerInfo& l : layers) {
    Json sums = Json::array();
    for (uint64_t h : l.xxh3) sums.push_back(Hex64(h));
    layers_j.push_back(Json{{"file", l.file}, {"layout", l.layout.ToJson()}, {"xxh3", sums}});
  }
  return Json{{"version", 1},
              {"num_layers", num_layers},
              {"num_experts", num_experts},
              {"layers", layers_j}};
}

Result<ExpertIndex> ExpertIndex::FromJson(const Json& j, const std::string& what) {
  ExpertIndex idx;
  RW_ASSIGN_OR_RETURN(int64_t version, JsonInt(j, "version", what));
  if (version != 1)
    return Error(ErrorCode::kUnsupported, "{}: expert index version {} (this build reads 1)", what,
                 version);
  RW_ASSIGN_OR_RETURN(int64_t nl, JsonInt(j, "num_layers", what));
  RW_ASSIGN_OR_RETURN(int64_t ne, JsonInt(j, "num_experts", what));
  if (nl <= 0 || nl > 10000 || ne <= 0 || ne > 100000)
    return Error(ErrorCode::kCorrupt, "{}: implausible {} layers × {} experts", what, nl, ne);
  idx.num_layers = static_cast<int>(nl);
  idx.num_experts = static_cast<int>(ne);
  if (!j.contains("layers") || !j["layers"].is_array() ||
      static_cast<int64_t>(j["layers"].size()) != nl)
    return Error(ErrorCode::kCorrupt, "{}: 'layers' must list {} layers", what, nl);
  for (size_t i = 0; i < j["layers"].size(); ++i) {
    const Json& lj = j["layers"][i];
    std::string w = fmt::format("{} layer {}", what, i);
    ExpertLayerInfo info;
    RW_ASSIGN_OR_RETURN(info.file, JsonString(lj, "file", w));
    if (info.file.find("..") != std::string::npos || info.file.empty() || info.file[0] == '/')
      return Error(ErrorCode::kCorrupt, "{}: file name '{}' leaves the model directory", w,
                   info.file);
    if (!lj.contains("layout")) return Error(ErrorCode::kCorrupt, "{}: no layout", w);
    RW_ASSIGN_OR_RETURN(info.layout, ExpertLayout::FromJson(lj["layout"], w));
    if (!lj.contains("xxh3") || !lj["xxh3"].is_array() ||
        static_cast<int64_t>(lj["xxh3"].size()) != ne)
      return Error(ErrorCode::kCorrupt, "{}: 'xxh3' must hold {} checksums", w, ne);
    for (const Json& h : lj["xxh3"]) {
      if (!h.is_string()) return Error(ErrorCode::kCorrupt, "{}: checksum is not a string", w);
      RW_ASSIGN_OR_RETURN(uint64_t v, ParseHex64(h.get<std::string>()));
      info.xxh3.push_back(v);
    }
    idx.layers.push_back(std::move(info));
  }
  return idx;
}

std::string ExpertLayerFileName(int layer) {
  return fmt::format("experts/layer_{:03d}.bin", layer);
}

Result<ExpertLayerWriter> ExpertLayerWriter::Create(const std::string& path,
                                                    const ExpertLayout& layout, int num_experts) {
  ExpertLayerWriter w;
  RW_ASSIGN_OR_RETURN(w.file_, File::Create(path));
  w.layout_ = layout;
  w.xxh3_.assign(num_experts, 0);
  w.written_.assign(num_experts, false);
  RW_RETURN_IF_ERROR(w.file_.Truncate(layout.stride * static_cast<uint64_t>(num_experts)));
  return w;
}

Status ExpertLayerWriter::Write(int expert, const uint8_t* blob) {
  if (expert < 0 || expert >= static_cast<int>(written_.size()))
    return Error(ErrorCode::kInvalidArgument, "{}: expert {} out of range", file_.path(), expert);
  if (written_[expert])
    return Error(ErrorCode::kInvalidArgument, "{}: expert {} written twice", file_.path(), expert);
  RW_RETURN_IF_ERROR(
      file_.PwriteAll(blob, layout_.stride, layout_.stride * static_cast<uint64_t>(expert)));
  xxh3_[expert] = Xxh3_64(blob, layout_.stride);
  written_[expert] = true;
  return Status::Ok();
}

Result<std::vector<uint64_t>> ExpertLayerWriter::Finish() {
  for (size_t e = 0; e < written_.size(); ++e)
    if (!written_[e])
      return Error(ErrorCode::kInternal, "{}: expert {} never written", file_.path(), e);
  RW_RETURN_IF_ERROR(file_.Sync());
  RW_RETURN_IF_ERROR(file_.Close());
  return xxh3_;
}

}  // namespace rw
