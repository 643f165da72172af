// libFuzzer target: tokenizer.json, shipped with every model (a model directory is untrusted
// input). A file the loader accepts is then used as generation uses it: encode text (specials,
// spaces, invalid UTF-8), decode all of it and token by token through the streaming decoder.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

void Require(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_tokenizer_json: broken promise: %s\n", what);
    abort();
  }
}

// Text that reaches the normalizer, the added-token splitter, BPE and byte fallback.
constexpr std::string_view kText =
    "<bos>Hello world, abc <eos>\n\t  x<0x41>\xE2\x96\x81 \xC3\xA9\xF0\x9F\x98\x80 \xFF\xC3 end";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool fast : {true, false}) {
    rw::TokenizerOptions options;
    options.enable_chunking = options.enable_cache = fast;
    auto tok = rw::Tokenizer::FromJsonText(text, "fuzz tokenizer.json", options);
    if (!tok.ok()) return 0;
    const int32_t vocab = tok->vocab_size();
    Require(vocab >= 0, "negative vocabulary size");
    std::vector<int32_t> ids = tok->Encode(kText, /*add_bos=*/true);
    for (int32_t id : ids) Require(id >= 0 && id < vocab, "encoded id outside the vocabulary");
    std::string whole = tok->Decode(ids);
    // Every id, and a few that name no token, decoded at once and streamed.
    std::vector<int32_t> all;
    for (int32_t id = -2; id < std::min(vocab, 512) + 2; ++id) all.push_back(id);
    whole += tok->Decode(all, /*skip_special=*/true);
    rw::StreamDecoder stream(*tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.Push(id);
    streamed += stream.Flush();
    Require(streamed == tok->Decode(ids), "streamed text differs from Decode");
    for (int32_t id : {tok->bos_id(), tok->eos_id(), tok->pad_id(), tok->unk_id()})
      Require(id >= -1 && id < vocab, "special id outside the vocabulary");
  }
  return 0;
}
