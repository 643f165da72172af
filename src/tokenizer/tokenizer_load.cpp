// Loading tokenizer.json: the vocab and merges are streamed with JsonScanner (they are ~all of the
// 33 MB); the other sections are small and go through nlohmann with checked field access.
#include <algorithm>
#include <map>

#include "base/file.h"
#include "base/json.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/tokenizer_json.h"

namespace rw {
namespace {

struct ModelSection {
  bool present = false;
  bool has_vocab = false;
  StringList vocab;
  std::vector<int32_t> ids;
  StringList merges;                               // pairs back to back
  std::map<std::string, std::string_view> fields;  // other keys, raw JSON
};

struct Sections {
  ModelSection model;
  std::map<std::string, std::string_view> raw;  // added_tokens, normalizer, ...
};

Status ScanError(const JsonScanner& sc) {
  return Status(ErrorCode::kCorrupt, sc.error());
}

bool ScanVocab(JsonScanner& sc, ModelSection* m) {
  if (sc.Peek() != '{') return sc.Fail("model.vocab must be an object mapping token to id");
  if (!sc.BeginObject()) return false;
  std::string token;
  while (sc.NextKey(&token)) {
    int64_t id;
    if (!sc.ReadInt(&id)) return false;
    if (id < 0 || id > INT32_MAX) return sc.Fail("model.vocab: id out of range");
    m->vocab.Add(token);
    m->ids.push_back(static_cast<int32_t>(id));
  }
  m->has_vocab = true;
  return sc.ok();
}

// Merges come as "a b" strings (tokenizers < 0.20) or ["a", "b"] pairs.
bool ScanMerges(JsonScanner& sc, ModelSection* m) {
  if (sc.Peek() != '[') return sc.Fail("model.merges must be an array");
  if (!sc.BeginArray()) return false;
  std::string a, b;
  while (sc.NextElement()) {
    char c = sc.Peek();
    if (c == '"') {
      if (!sc.ReadString(&a)) return false;
      size_t sp = a.find(' ');
      if (sp == std::string::npos || a.find(' ', sp + 1) != std::string::npos)
        return sc.Fail("a merge string must be two tokens separated by one space");
      m->merges.Add(std::string_view(a).substr(0, sp));
      m->merges.Add(std::string_view(a).substr(sp + 1));
    } else if (c == '[') {
      if (!sc.BeginArray()) return false;
      if (!sc.NextElement() || !sc.ReadString(&a) || !sc.NextElement() || !sc.ReadString(&b))
        return sc.ok() ? sc.Fail("a merge pair must hold two strings") : false;
      if (sc.NextElement()) return sc.Fail("a merge pair must hold exactly two strings");
      if (!sc.ok()) return false;
      m->merges.Add(a);
      m->merges.Add(b);
    } else {
      return sc.Fail("a merge must be a string or a pair of strings");
    }
  }
  return sc.ok();
}

bool ScanModel(JsonScanner& sc, ModelSection* m) {
  if (sc.Peek() != '{') return sc.Fail("'model' must be an object");
  if (!sc.BeginObject()) return false;
  m->present = true;
  std::string key;
  while (sc.NextKey(&key)) {
    if (key == "vocab") {
      if (!ScanVocab(sc, m)) return false;
    } else if (key == "merges") {
      if (!ScanMerges(sc, m)) return false;
    } else {
      std::string_view raw;
      if (!sc.SkipValue(&raw)) return false;
      m->fields[key] = raw;
    }
  }
  return sc.ok();
}

Result<Sections> Scan(std::string_view text, const std::string& name) {
  Sections s;
  JsonScanner sc(text, name);
  if (sc.Peek() != '{') {
    sc.Fail("expected a JSON object at the top level");
    return ScanError(sc);
  }
  sc.BeginObject();
  std::string key;
  while (sc.NextKey(&key)) {
    if (key == "model") {
      if (!ScanModel(sc, &s.model)) break;
    } else {
      std::string_view raw;
      if (!sc.SkipValue(&raw)) break;
      s.raw[key] = raw;
    }
  }
  if (sc.ok()) sc.ExpectEnd();
  if (!sc.ok()) return ScanError(sc);
  return s;
}

// Parses a raw section; absent sections are null.
Result<Json> ParseRaw(const std::map<std::string, std::string_view>& raw, const std::string& key,
                      const std::string& where) {
  auto it = raw.find(key);
  if (it == raw.end()) return Json(nullptr);
  Json j = Json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error(ErrorCode::kCorrupt, "{}: malformed JSON", where);
  return j;
}

Result<BpeOptions> ModelOptions(const ModelSection& m, const std::string& name) {
  BpeOptions o;
  auto field = [&](const char* key) -> Result<Json> {
    return ParseRaw(m.fields, key, name + ": model." + key);
  };
  RW_ASSIGN_OR_RETURN(Json type, field("type"));
  if (!type.is_null() && !(type.is_string() && type.get<std::string>() == "BPE")) {
    return Error(ErrorCode::kUnsupported, "{}: model type {} is not supported (only BPE)", name,
                 type.dump());
  }
  RW_ASSIGN_OR_RETURN(Json unk, field("unk_token"));
  if (unk.is_string()) {
    o.unk_token = unk.get<std::string>();
  } else if (!unk.is_null()) {
    return Error(ErrorCode::kCorrupt, "{}: model.unk_token must be a string or null", name);
  }
  for (auto [key, dst] :
       {std::pair{"byte_fallback", &o.byte_fallback}, std::pair{"fuse_unk", &o.fuse_unk},
        std::pair{"ignore_merges", &o.ignore_merges}}) {
    RW_ASSIGN_OR_RETURN(Json v, field(key));
    if (v.is_boolean()) {
      *dst = v.get<bool>();
    } else if (!v.is_null()) {
      return Error(ErrorCode::kCorrupt, "{}: model.{} must be true or false", name, key);
    }
  }
  RW_ASSIGN_OR_RETURN(Json dropout, field("dropout"));
  if (!dropout.is_null() && !(dropout.is_number() && dropout.get<double>() == 0.0)) {
    return Error(ErrorCode::kUnsupported, "{}: model.dropout {} is not supported", name,
                 dropout.dump());
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    RW_ASSIGN_OR_RETURN(Json v, field(key));
    if (!v.is_null() && !(v.is_string() && v.get<std::string>().empty())) {
      return Error(ErrorCode::kUnsupported, "{}: model.{} {} is not supported", name, key,
                   v.dump());
    }
  }
  return o;
}

Result<std::vector<AddedToken>> ParseAddedTokens(const Json& j, const std::string& name) {
  std::vector<AddedToken> out;
  if (j.is_null()) return out;
  if (!j.is_array()) return Error(ErrorCode::kCorrupt, "{}: added_tokens must be an array", name);
  for (size_t i = 0; i < j.size(); ++i) {
    const Json& e = j[i];
    std::string where = fmt::format("{}: added_tokens[{}]", name, i);
    if (!e.is_object()) return Error(ErrorCode::kCorrupt, "{} must be an object", where);
    AddedToken t;
    auto id = e.find("id");
    if (id == e.end() || !id->is_number_unsigned() || id->get<uint64_t>() >= (1u << 24))
      return Error(ErrorCode::kCorrupt, "{}: 'id' missing or not a valid id", where);
    t.id = static_cast<int32_t>(id->get<uint64_t>());
    RW_ASSIGN_OR_RETURN(t.content, JsonString(e, "content", where));
    for (auto [key, dst] :
         {std::pair{"special", &t.special}, std::pair{"single_word", &t.single_word},
          std::pair{"lstrip", &t.lstrip}, std::pair{"rstrip", &t.rstrip},
          std::pair{"normalized", &t.normalized}}) {
      auto it = e.find(key);
      if (it == e.end()) continue;
      if (!it->is_boolean())
        return Error(ErrorCode::kCorrupt, "{}: '{}' must be true or false", where, key);
      *dst = it->get<bool>();
    }
    out.push_back(std::move(t));
  }
  return out;
}

// The first special token of the single-sequence template, when it precedes the sequence.
int32_t TemplateBos(const Json& pp, const Tokenizer& tok) {
  // find() rather than Json::value(), which throws on a field of another type.
  if (!pp.is_object()) return -1;
  if (auto type = pp.find("type"); type == pp.end() || *type != "TemplateProcessing") return -1;
  auto single = pp.find("single");
  if (single == pp.end() || !single->is_array() || single->empty()) return -1;
  const Json& first = (*single)[0];
  auto st = first.find("SpecialToken");
  if (st == first.end() || !st->is_object() || !st->contains("id") || !(*st)["id"].is_string())
    return -1;
  std::string name = (*st)["id"].get<std::string>();
  auto specials = pp.find("special_tokens");
  if (specials != pp.end() && specials->is_object() && specials->contains(name)) {
    const Json& entry = (*specials)[name];
    auto ids = entry.is_object() ? entry.find("ids") : entry.end();
    // An id outside the vocabulary would reach the embedding lookup as <bos>.
    if (ids != entry.end() && ids->is_array() && ids->size() == 1 &&
        (*ids)[0].is_number_unsigned() &&
        (*ids)[0].get<uint64_t>() < static_cast<uint64_t>(tok.vocab_size()))
      return static_cast<int32_t>((*ids)[0].get<uint64_t>());
  }
  return tok.TokenToId(name);
}

}  // namespace

Result<Tokenizer> Tokenizer::Load(const std::string& path, const TokenizerOptions& options) {
  // Gemma's tokenizer.json is ~32 MB; the limit is far above any real one, so a damaged file
  // is refused before it is read into memory.
  RW_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, 512u << 20));
  return FromJsonText(text, path, options);
}

Result<Tokenizer> Tokenizer::FromJsonText(std::string_view text, const std::string& name,
                                          const TokenizerOptions& options) {
  // Offsets into the string arenas are 32-bit.
  if (text.size() >= (size_t{1} << 31))
    return Error(ErrorCode::kUnsupported, "{}: larger than 2 GiB", name);
  RW_ASSIGN_OR_RETURN(Sections s, Scan(text, name));
  ModelSection& m = s.model;
  if (!m.present) return Error(ErrorCode::kCorrupt, "{}: no 'model' section", name);
  if (!m.has_vocab) return Error(ErrorCode::kCorrupt, "{}: model.vocab missing", name);

  auto impl = std::make_shared<TokenizerImpl>();
  RW_ASSIGN_OR_RETURN(BpeOptions bpe_options, ModelOptions(m, name));
  bpe_options.enable_chunking = options.enable_chunking;
  bpe_options.enable_cache = options.enable_cache;
  RW_ASSIGN_OR_RETURN(impl->model,
                      BpeModel::Build(std::move(m.vocab), m.ids, m.merges, bpe_options, name));

  RW_ASSIGN_OR_RETURN(Json normalizer, ParseRaw(s.raw, "normalizer", name + ": normalizer"));
  RW_ASSIGN_OR_RETURN(impl->normalizer, Normalizer::FromJson(normalizer, name + ": normalizer"));
  RW_ASSIGN_OR_RETURN(Json pre, ParseRaw(s.raw, "pre_tokenizer", name + ": pre_tokenizer"));
  RW_ASSIGN_OR_RETURN(impl->pre_tokenizer, PreTokenizer::FromJson(pre, name + ": pre_tokenizer"));
  RW_ASSIGN_OR_RETURN(Json decoder, ParseRaw(s.raw, "decoder", name + ": decoder"));
  RW_ASSIGN_OR_RETURN(impl->decoder, Decoder::FromJson(decoder, name + ": decoder"));
  RW_ASSIGN_OR_RETURN(Json added_json, ParseRaw(s.raw, "added_tokens", name + ": added_tokens"));
  RW_ASSIGN_OR_RETURN(std::vector<AddedToken> added, ParseAddedTokens(added_json, name));

  // Id table: model tokens, then added tokens on top (their content wins, as in tokenizers).
  int32_t size = impl->model.id_limit();
  for (const AddedToken& t : added) size = std::max(size, t.id + 1);
  impl->id_to_token.resize(static_cast<size_t>(size));
  impl->flags.assign(static_cast<size_t>(size), 0);
  for (int32_t id = 0; id < impl->model.id_limit(); ++id) {
    if (!impl->model.Has(id)) continue;
    impl->id_to_token[static_cast<size_t>(id)] = std::string(impl->model.Token(id));
    impl->flags[static_cast<size_t>(id)] = TokenizerImpl::kPresent;
  }
  std::vector<AddedToken> raw_tokens, norm_tokens;
  std::vector<std::string> raw_patterns, norm_patterns;
  for (const AddedToken& t : added) {
    size_t id = static_cast<size_t>(t.id);
    impl->id_to_token[id] = t.content;
    impl->flags[id] = TokenizerImpl::kPresent | (t.special ? TokenizerImpl::kSpecial : 0);
    impl->added_ids[t.content] = t.id;
    if (t.normalized) {
      norm_tokens.push_back(t);
      norm_patterns.push_back(impl->normalizer.Apply(t.content));
    } else {
      raw_tokens.push_back(t);
      raw_patterns.push_back(t.content);
    }
  }
  for (const AddedToken& t : added)
    if (impl->flags[static_cast<size_t>(t.id)] & TokenizerImpl::kSpecial)
      impl->special_ids.push_back(t.id);
  std::sort(impl->special_ids.begin(), impl->special_ids.end());
  impl->special_ids.erase(std::unique(impl->special_ids.begin(), impl->special_ids.end()),
                          impl->special_ids.end());
  impl->raw_matcher.Build(raw_tokens, raw_patterns);
  impl->normalized_matcher.Build(norm_tokens, norm_patterns);

  Tokenizer tok(impl);
  RW_ASSIGN_OR_RETURN(Json pp, ParseRaw(s.raw, "post_processor", name + ": post_processor"));
  impl->bos_id = TemplateBos(pp, tok);
  if (impl->bos_id < 0) impl->bos_id = tok.TokenToId("<bos>");
  impl->eos_id = tok.TokenToId("<eos>");
  impl->pad_id = tok.TokenToId("<pad>");
  impl->unk_id = impl->model.unk_id();
  return tok;
}

}  // namespace rw
