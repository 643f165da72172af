// Runs one prompt of token ids through llama.cpp (libllama) and writes the logits of every
// position as raw little-endian float32 [n_ids, vocab], the format `redwing logits --out`
// writes, so that tools/compare/twin_check.py can compare the two engines on a GGUF twin.
//
//   llama_logits MODEL.gguf IDS OUT [--threads N] [--kv f16|f32] [--no-repack] [--dump DIR]
//
// --dump DIR also writes every named f32 intermediate of the graph (DIR/<name>.f32, e.g.
// l_out-3.f32 [tokens, hidden]) for locating where the engines part (REDWING_DUMP on the other
// side). IDS is comma-separated. The prompt goes in as one batch with every position's logits kept;
// everything else is llama.cpp's default context (its KV cache type unless --kv says).
// Built by build_llama_cpp.sh against the libllama in its build directory.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

namespace {

int Fail(const std::string& msg) {
  std::fprintf(stderr, "llama_logits: %s\n", msg.c_str());
  return 1;
}

bool ParseIds(const char* s, std::vector<llama_token>* ids) {
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (cur.empty()) return false;
      char* end = nullptr;
      long v = std::strtol(cur.c_str(), &end, 10);
      if (*end != '\0' || v < 0) return false;
      ids->push_back(static_cast<llama_token>(v));
      cur.clear();
      if (*p == '\0') return true;
    } else {
      cur += *p;
    }
  }
}

// The graph's eval callback: asked first whether a tensor is wanted, then given it computed.
bool DumpTensor(ggml_tensor* t, bool ask, void* user) {
  if (t->type != GGML_TYPE_F32 || t->name[0] == '\0' || !ggml_is_contiguous(t))
    return ask ? false : true;
  if (ask) return true;
  std::vector<char> buf(ggml_nbytes(t));
  ggml_backend_tensor_get(t, buf.data(), 0, buf.size());
  const std::string path = *static_cast<std::string*>(user) + "/" + t->name + ".f32";
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(buf.data(), 1, buf.size(), f);
    std::fclose(f);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4)
    return Fail(
        "usage: llama_logits MODEL.gguf IDS OUT [--threads N] [--kv f16|f32] [--no-repack] [--dump "
        "DIR]");
  int threads = 2;
  bool kv_f32 = false, repack = true;
  std::string dump;
  for (int i = 4; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--kv") && i + 1 < argc) {
      kv_f32 = !std::strcmp(argv[++i], "f32");
    } else if (!std::strcmp(argv[i], "--dump") && i + 1 < argc) {
      dump = argv[++i];
    } else if (!std::strcmp(argv[i], "--no-repack")) {
      repack = false;
    } else {
      return Fail(std::string("unknown option ") + argv[i]);
    }
  }
  std::vector<llama_token> ids;
  if (!ParseIds(argv[2], &ids) || ids.empty()) return Fail("IDS must be comma-separated token ids");

  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.use_extra_bufts = repack;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) return Fail(std::string("cannot load ") + argv[1]);
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  for (llama_token t : ids)
    if (t >= vocab) return Fail("token id " + std::to_string(t) + " is outside the vocabulary");

  llama_context_params cp = llama_context_default_params();
  const uint32_t n = static_cast<uint32_t>(ids.size());
  cp.n_ctx = n < 256 ? 256 : n;
  cp.n_batch = n;
  cp.n_ubatch = n;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  if (kv_f32) {
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
  }
  if (!dump.empty()) {
    cp.cb_eval = DumpTensor;
    cp.cb_eval_user_data = &dump;
  }
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) return Fail("cannot create a context");

  llama_batch batch = llama_batch_init(static_cast<int32_t>(n), 0, 1);
  for (uint32_t i = 0; i < n; ++i) {
    batch.token[i] = ids[i];
    batch.pos[i] = static_cast<llama_pos>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = static_cast<int32_t>(n);
  if (llama_decode(ctx, batch) != 0) return Fail("llama_decode failed");

  FILE* out = std::fopen(argv[3], "wb");
  if (out == nullptr) return Fail(std::string("cannot write ") + argv[3]);
  for (uint32_t i = 0; i < n; ++i) {
    const float* row = llama_get_logits_ith(ctx, static_cast<int32_t>(i));
    if (row == nullptr || std::fwrite(row, sizeof(float), vocab, out) != static_cast<size_t>(vocab))
      return Fail("cannot write the logits of position " + std::to_string(i));
  }
  if (std::fclose(out) != 0) return Fail(std::string("cannot close ") + argv[3]);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
