#include "tokenizer/tokenizer.h"

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace rw {

void Tokenizer::EncodeAppend(std::string_view text, std::vector<int32_t>* out) const {
  EncodeAppend(text, {}, out);
}

void Tokenizer::EncodeAppend(std::string_view text, std::span<const TextSpan> plain,
                             std::vector<int32_t>* out) const {
  const TokenizerImpl& t = *impl_;
  BpeScratch scratch;
  std::vector<AddedTokenMatcher::Segment> segments, normalized_segments;
  std::vector<std::string_view> pieces, tmp;
  std::string normalized;
  t.raw_matcher.Split(text, &segments, plain);
  for (const auto& seg : segments) {
    if (seg.id >= 0) {
      out->push_back(seg.id);
      continue;
    }
    std::string_view norm = seg.text;
    if (!t.normalizer.empty()) {
      normalized = t.normalizer.Apply(seg.text);
      norm = normalized;
    }
    // Offsets do not survive normalization: a stretch that overlaps plain text matches no
    // special token at all.
    const size_t begin = static_cast<size_t>(seg.text.data() - text.data());
    const size_t end = begin + seg.text.size();
    bool overlaps = false;
    for (const TextSpan& p : plain) overlaps = overlaps || (p.begin < end && begin < p.end);
    const TextSpan all{0, norm.size()};
    normalized_segments.clear();
    t.normalized_matcher.Split(
        norm, &normalized_segments,
        overlaps ? std::span<const TextSpan>(&all, 1) : std::span<const TextSpan>());
    for (const auto& nseg : normalized_segments) {
      if (nseg.id >= 0) {
        out->push_back(nseg.id);
        continue;
      }
      pieces.assign(1, nseg.text);
      t.pre_tokenizer.Apply(&pieces, &tmp);
      for (std::string_view piece : pieces) t.model.Encode(piece, &scratch, out);
    }
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_bos && impl_->bos_id >= 0) out.push_back(impl_->bos_id);
  EncodeAppend(text, &out);
  return out;
}

std::vector<int32_t> Tokenizer::EncodePlain(std::string_view text, bool add_bos) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_bos && impl_->bos_id >= 0) out.push_back(impl_->bos_id);
  const TextSpan all{0, text.size()};
  EncodeAppend(text, std::span<const TextSpan>(&all, 1), &out);
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  const TokenizerImpl& t = *impl_;
  auto keep = [&](int32_t id) {
    if (id < 0 || id >= vocab_size()) return false;
    uint8_t f = t.flags[static_cast<size_t>(id)];
    if (!(f & TokenizerImpl::kPresent)) return false;
    return !(skip_special && (f & TokenizerImpl::kSpecial));
  };
  if (t.decoder.streamable()) {
    std::string bytes;
    for (int32_t id : ids) {
      if (keep(id)) t.decoder.TokenBytes(t.id_to_token[static_cast<size_t>(id)], &bytes);
    }
    return utf8::Lossy(bytes);
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (keep(id)) tokens.push_back(t.id_to_token[static_cast<size_t>(id)]);
  }
  return t.decoder.Decode(std::move(tokens));
}

int32_t Tokenizer::TokenToId(std::string_view token) const {
  auto it = impl_->added_ids.find(std::string(token));
  if (it != impl_->added_ids.end()) return it->second;
  return impl_->model.Lookup(token);
}

const std::string& Tokenizer::IdToToken(int32_t id) const {
  static const std::string kNone;
  if (id < 0 || id >= vocab_size()) return kNone;
  return impl_->id_to_token[static_cast<size_t>(id)];
}

int32_t Tokenizer::vocab_size() const {
  return static_cast<int32_t>(impl_->id_to_token.size());
}

bool Tokenizer::IsSpecial(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  return (impl_->flags[static_cast<size_t>(id)] & TokenizerImpl::kSpecial) != 0;
}

const std::vector<int32_t>& Tokenizer::special_ids() const {
  return impl_->special_ids;
}

int32_t Tokenizer::bos_id() const {
  return impl_->bos_id;
}
int32_t Tokenizer::eos_id() const {
  return impl_->eos_id;
}
int32_t Tokenizer::pad_id() const {
  return impl_->pad_id;
}
int32_t Tokenizer::unk_id() const {
  return impl_->unk_id;
}

// ---- StreamDecoder ----

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::Push(int32_t id) {
  const TokenizerImpl& t = *tokenizer_.impl_;
  if (t.decoder.streamable()) {
    if (id < 0 || id >= tokenizer_.vocab_size()) return "";
    uint8_t f = t.flags[static_cast<size_t>(id)];
    if (!(f & TokenizerImpl::kPresent) || (skip_special_ && (f & TokenizerImpl::kSpecial)))
      return "";
    t.decoder.TokenBytes(t.id_to_token[static_cast<size_t>(id)], &pending_);
    std::string out;
    size_t used = utf8::AppendLossy(pending_, /*final=*/false, &out);
    pending_.erase(0, used);
    return out;
  }
  // Generic path: decode everything so far and release the new tail, holding it back while it
  // ends in U+FFFD (possibly a character still incomplete).
  ids_.push_back(id);
  std::string full = tokenizer_.Decode(ids_, skip_special_);
  if (full.ends_with(utf8::kReplacement) || full.size() <= emitted_) return "";
  std::string out = full.substr(emitted_);
  emitted_ = full.size();
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out;
  if (!pending_.empty()) {
    utf8::AppendLossy(pending_, /*final=*/true, &out);
    pending_.clear();
  }
  if (!ids_.empty()) {
    std::string full = tokenizer_.Decode(ids_, skip_special_);
    if (full.size() > emitted_) out += full.substr(emitted_);
    ids_.clear();
  }
  emitted_ = 0;
  return out;
}

}  // namespace rw
