#include "tokenizer/tokenizer_pipeline.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace rw {
namespace {

Status Unsupported(const std::string& where, const std::string& what) {
  return Error(ErrorCode::kUnsupported, "{}: {}", where, what);
}

Status Bad(const std::string& where, const std::string& what) {
  return Error(ErrorCode::kCorrupt, "{}: {}", where, what);
}

Result<std::string> TypeOf(const Json& j, const std::string& where) {
  if (!j.is_object()) return Bad(where, "must be an object or null");
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) return Bad(where, "field 'type' missing or not a string");
  return it->get<std::string>();
}

// {"String": s} -> s. Regex patterns are not supported (Gemma uses none).
Result<std::string> StringPattern(const Json& j, const std::string& where) {
  auto it = j.find("pattern");
  if (it == j.end() || !it->is_object()) return Bad(where, "field 'pattern' missing");
  if (it->contains("Regex")) return Unsupported(where, "Regex patterns are not supported");
  auto s = it->find("String");
  if (s == it->end() || !s->is_string()) return Bad(where, "pattern must be {\"String\": ...}");
  std::string p = s->get<std::string>();
  if (p.empty()) return Bad(where, "pattern is empty");
  return p;
}

Result<std::string> StringField(const Json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string())
    return Bad(where, std::string("field '") + key + "' missing or not a string");
  return it->get<std::string>();
}

void ReplaceAll(std::string_view in, std::string_view pattern, std::string_view content,
                std::string* out) {
  out->clear();
  size_t pos = 0;
  while (true) {
    size_t hit = in.find(pattern, pos);
    if (hit == std::string_view::npos) break;
    out->append(in.substr(pos, hit - pos));
    out->append(content);
    pos = hit + pattern.size();
  }
  out->append(in.substr(pos));
}

}  // namespace

int ParseByteToken(std::string_view t) {
  if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

// ---- Normalizer ----

Result<Normalizer> Normalizer::FromJson(const Json& j, const std::string& where) {
  Normalizer n;
  if (j.is_null()) return n;
  RW_ASSIGN_OR_RETURN(std::string type, TypeOf(j, where));
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) return Bad(where, "Sequence needs a 'normalizers' array");
    for (size_t i = 0; i < it->size(); ++i) {
      RW_ASSIGN_OR_RETURN(Normalizer sub,
                          FromJson((*it)[i], where + ".normalizers[" + std::to_string(i) + "]"));
      n.steps_.insert(n.steps_.end(), sub.steps_.begin(), sub.steps_.end());
    }
  } else if (type == "Replace") {
    RW_ASSIGN_OR_RETURN(std::string pattern, StringPattern(j, where));
    RW_ASSIGN_OR_RETURN(std::string content, StringField(j, "content", where));
    n.steps_.push_back({false, std::move(pattern), std::move(content)});
  } else if (type == "Prepend") {
    RW_ASSIGN_OR_RETURN(std::string content, StringField(j, "prepend", where));
    n.steps_.push_back({true, "", std::move(content)});
  } else {
    return Unsupported(where, "normalizer type '" + type +
                                  "' is not supported (supported: Replace, Prepend, Sequence)");
  }
  return n;
}

std::string Normalizer::Apply(std::string_view text) const {
  std::string cur(text), next;
  for (const Step& s : steps_) {
    if (s.prepend) {
      if (!cur.empty()) cur.insert(0, s.content);
    } else {
      if (cur.find(s.pattern) == std::string::npos) continue;
      ReplaceAll(cur, s.pattern, s.content, &next);
      cur.swap(next);
    }
  }
  return cur;
}

// ---- PreTokenizer ----

Result<PreTokenizer> PreTokenizer::FromJson(const Json& j, const std::string& where) {
  PreTokenizer p;
  if (j.is_null()) return p;
  RW_ASSIGN_OR_RETURN(std::string type, TypeOf(j, where));
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array())
      return Bad(where, "Sequence needs a 'pretokenizers' array");
    for (size_t i = 0; i < it->size(); ++i) {
      RW_ASSIGN_OR_RETURN(PreTokenizer sub,
                          FromJson((*it)[i], where + ".pretokenizers[" + std::to_string(i) + "]"));
      p.steps_.insert(p.steps_.end(), sub.steps_.begin(), sub.steps_.end());
    }
  } else if (type == "Split") {
    RW_ASSIGN_OR_RETURN(std::string pattern, StringPattern(j, where));
    RW_ASSIGN_OR_RETURN(std::string behavior, StringField(j, "behavior", where));
    auto inv = j.find("invert");
    if (inv != j.end() && !(inv->is_boolean() && !inv->get<bool>()))
      return Unsupported(where, "Split with invert=true is not supported");
    Step step{std::move(pattern), Behavior::kRemoved};
    if (behavior == "Removed") {
      step.behavior = Behavior::kRemoved;
    } else if (behavior == "Isolated") {
      step.behavior = Behavior::kIsolated;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = Behavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      step.behavior = Behavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      step.behavior = Behavior::kContiguous;
    } else {
      return Bad(where, "unknown Split behavior '" + behavior + "'");
    }
    p.steps_.push_back(std::move(step));
  } else {
    return Unsupported(
        where, "pre_tokenizer type '" + type + "' is not supported (supported: Split, Sequence)");
  }
  return p;
}

void PreTokenizer::Split(std::string_view s, const Step& step, std::vector<std::string_view>* out) {
  // Matches and the gaps between them, in order; then the behavior decides what joins what
  // (same folding rules as tokenizers' SplitDelimiterBehavior).
  struct Part {
    size_t begin, end;
    bool match;
  };
  std::vector<Part> parts;
  size_t pos = 0;
  for (size_t hit = s.find(step.pattern); hit != std::string_view::npos;
       hit = s.find(step.pattern, pos)) {
    if (hit > pos) parts.push_back({pos, hit, false});
    parts.push_back({hit, hit + step.pattern.size(), true});
    pos = hit + step.pattern.size();
  }
  if (pos < s.size() || parts.empty()) parts.push_back({pos, s.size(), false});

  std::vector<Part> res;
  bool prev_match = false;
  switch (step.behavior) {
    case Behavior::kRemoved:
      for (const Part& p : parts)
        if (!p.match) res.push_back(p);
      break;
    case Behavior::kIsolated:
      res.swap(parts);
      break;
    case Behavior::kMergedWithPrevious:
      for (const Part& p : parts) {
        if (p.match && !prev_match && !res.empty()) {
          res.back().end = p.end;
        } else {
          res.push_back(p);
        }
        prev_match = p.match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (size_t i = parts.size(); i-- > 0;) {
        const Part& p = parts[i];
        if (p.match && !prev_match && !res.empty()) {
          res.back().begin = p.begin;
        } else {
          res.push_back(p);
        }
        prev_match = p.match;
      }
      std::reverse(res.begin(), res.end());
      break;
    case Behavior::kContiguous:
      for (const Part& p : parts) {
        if (p.match == prev_match && !res.empty()) {
          res.back().end = p.end;
        } else {
          res.push_back(p);
        }
        prev_match = p.match;
      }
      break;
  }
  for (const Part& p : res) {
    if (p.end > p.begin) out->push_back(s.substr(p.begin, p.end - p.begin));
  }
}

void PreTokenizer::Apply(std::vector<std::string_view>* pieces,
                         std::vector<std::string_view>* tmp) const {
  for (const Step& step : steps_) {
    tmp->clear();
    for (std::string_view piece : *pieces) {
      if (piece.find(step.pattern) == std::string_view::npos) {
        tmp->push_back(piece);  // common case for Gemma: nothing to split
      } else {
        Split(piece, step, tmp);
      }
    }
    pieces->swap(*tmp);
  }
}

// ---- Decoder ----

Status Decoder::Flatten(const Json& j, const std::string& where, std::vector<Step>* steps) {
  RW_ASSIGN_OR_RETURN(std::string type, TypeOf(j, where));
  if (type == "Sequence") {
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) return Bad(where, "Sequence needs a 'decoders' array");
    for (size_t i = 0; i < it->size(); ++i) {
      RW_RETURN_IF_ERROR(Flatten((*it)[i], where + ".decoders[" + std::to_string(i) + "]", steps));
    }
  } else if (type == "Replace") {
    RW_ASSIGN_OR_RETURN(std::string pattern, StringPattern(j, where));
    RW_ASSIGN_OR_RETURN(std::string content, StringField(j, "content", where));
    steps->push_back({Kind::kReplace, std::move(pattern), std::move(content)});
  } else if (type == "ByteFallback") {
    steps->push_back({Kind::kByteFallback, "", ""});
  } else if (type == "Fuse") {
    steps->push_back({Kind::kFuse, "", ""});
  } else if (type == "Strip") {
    RW_ASSIGN_OR_RETURN(std::string content, StringField(j, "content", where));
    if (utf8::ValidCharLen(content) != content.size() || content.empty())
      return Bad(where, "Strip content must be one character");
    Step s{Kind::kStrip, "", std::move(content)};
    auto start = j.find("start"), stop = j.find("stop");
    if (start == j.end() || !start->is_number_unsigned() || stop == j.end() ||
        !stop->is_number_unsigned())
      return Bad(where, "Strip needs non-negative integers 'start' and 'stop'");
    s.start = start->get<int64_t>();
    s.stop = stop->get<int64_t>();
    steps->push_back(std::move(s));
  } else {
    return Unsupported(where, "decoder type '" + type +
                                  "' is not supported (supported: Replace, ByteFallback, Fuse, "
                                  "Strip, Sequence)");
  }
  return Status::Ok();
}

Result<Decoder> Decoder::FromJson(const Json& j, const std::string& where) {
  Decoder d;
  if (j.is_null()) return d;
  d.none_ = false;
  RW_RETURN_IF_ERROR(Flatten(j, where, &d.steps_));
  // Streamable: per-token steps, then an optional ByteFallback, then only Fuse.
  d.streamable_ = true;
  bool seen_bf = false, seen_fuse = false;
  for (const Step& s : d.steps_) {
    if (s.kind == Kind::kFuse) {
      seen_fuse = true;
    } else if (s.kind == Kind::kByteFallback) {
      if (seen_bf || seen_fuse) d.streamable_ = false;
      seen_bf = true;
    } else if (seen_bf || seen_fuse) {
      d.streamable_ = false;
    }
  }
  d.has_byte_fallback_ = seen_bf;
  return d;
}

std::string Decoder::ApplyPerToken(const Step& step, std::string_view token) {
  if (step.kind == Kind::kReplace) {
    std::string out;
    ReplaceAll(token, step.pattern, step.content, &out);
    return out;
  }
  // Strip: drop up to `start` leading and `stop` trailing copies of one character.
  const std::string& c = step.content;
  size_t b = 0, e = token.size();
  for (int64_t i = 0; i < step.start && e - b >= c.size() && token.substr(b, c.size()) == c; ++i)
    b += c.size();
  for (int64_t i = 0;
       i < step.stop && e - b >= c.size() && token.substr(e - c.size(), c.size()) == c; ++i)
    e -= c.size();
  return std::string(token.substr(b, e - b));
}

std::string Decoder::Decode(std::vector<std::string> tokens) const {
  if (none_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kReplace:
      case Kind::kStrip:
        for (std::string& t : tokens) t = ApplyPerToken(step, t);
        break;
      case Kind::kByteFallback: {
        std::vector<std::string> next;
        std::string bytes;
        for (std::string& t : tokens) {
          int b = ParseByteToken(t);
          if (b >= 0) {
            bytes.push_back(static_cast<char>(b));
            continue;
          }
          if (!bytes.empty()) {
            next.push_back(utf8::Lossy(bytes));
            bytes.clear();
          }
          next.push_back(std::move(t));
        }
        if (!bytes.empty()) next.push_back(utf8::Lossy(bytes));
        tokens.swap(next);
        break;
      }
      case Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

void Decoder::TokenBytes(std::string_view token, std::string* out) const {
  std::string cur(token);
  for (const Step& step : steps_) {
    if (step.kind == Kind::kReplace || step.kind == Kind::kStrip) {
      cur = ApplyPerToken(step, cur);
    } else if (step.kind == Kind::kByteFallback) {
      int b = ParseByteToken(cur);
      if (b >= 0) {
        out->push_back(static_cast<char>(b));
        return;
      }
    }
  }
  out->append(cur);
}

}  // namespace rw
