// The BPE model of a Hugging Face tokenizer.json: vocabulary, ranked merges, byte fallback and
// unk handling, with the merge order of `tokenizers` (lowest rank first, leftmost on ties).
//
// Speed: Gemma's pre-tokenizer does not split on spaces, so a whole line reaches the model as one
// word. Merging uses a heap over a linked list (O(n log n)). On top of that, a word is cut into
// chunks at the start of every "▁" run, but only where no vocabulary token can span the cut (for
// Gemma only ">▁</" does); no merge can then cross the cut, so the chunks tokenize independently
// and identically. Chunks (words) are short, so they merge by a linear scan, and repeated ones hit
// a small per-thread cache.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace rw {

// Strings back to back in one buffer; entry i is [offsets[i], offsets[i+1]).
struct StringList {
  std::string arena;
  std::vector<uint32_t> offsets{0};

  void Add(std::string_view s) {
    arena.append(s);
    offsets.push_back(static_cast<uint32_t>(arena.size()));
  }
  size_t size() const { return offsets.size() - 1; }
  std::string_view operator[](size_t i) const {
    return std::string_view(arena).substr(offsets[i], offsets[i + 1] - offsets[i]);
  }
};

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  // Exactness-preserving speedups; off only to test that they change nothing.
  bool enable_chunking = true;
  bool enable_cache = true;
};

// Reusable buffers for one encode call (keeps Encode allocation-free in steady state).
struct BpeScratch {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
  };
  struct Candidate {
    uint64_t key;  // rank << 32 | position: the heap pops the smallest
    int32_t left, right, new_id;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

class BpeModel {
 public:
  BpeModel() = default;
  BpeModel(BpeModel&&) noexcept = default;
  BpeModel& operator=(BpeModel&&) noexcept = default;

  // vocab[i] has id ids[i]. merges holds pairs back to back (2k, 2k+1) in rank order.
  // `source` names the file in error messages.
  static Result<BpeModel> Build(StringList vocab, const std::vector<int32_t>& ids,
                                const StringList& merges, const BpeOptions& options,
                                const std::string& source);

  // Appends the ids of one pre-tokenized word.
  void Encode(std::string_view word, BpeScratch* scratch, std::vector<int32_t>* out) const;

  // -1 when absent.
  int32_t Lookup(std::string_view token) const;
  bool Has(int32_t id) const {
    return id >= 0 && id < id_limit() && tokens_[static_cast<size_t>(id)].len != kNoToken;
  }
  // Text of a model id ("" for ids not in the vocabulary).
  std::string_view Token(int32_t id) const {
    if (!Has(id)) return {};
    const TokenRef& t = tokens_[static_cast<size_t>(id)];
    return std::string_view(arena_.data() + t.off, t.len);
  }
  // One past the largest id in the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t unk_id() const { return unk_id_; }
  size_t num_merges() const { return num_merges_; }
  bool chunking() const { return chunking_; }

 private:
  struct MergeSlot {
    uint64_t key;  // left << 32 | right; kEmpty when free
    int32_t rank, new_id;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  // out[i] = Lookup(keys[i]) for n <= 256 keys, faster than one by one.
  void LookupBatch(const std::string_view* keys, size_t n, int32_t* out) const;
  const MergeSlot* FindMerge(int32_t left, int32_t right) const;
  void InsertMerge(int32_t left, int32_t right, int32_t rank, int32_t new_id);
  void BuildIndex();
  void SetUpChunking(const BpeOptions& options);
  bool IsCut(std::string_view word, size_t pos) const;
  // Merge loop for short words (at most kSmallChunk symbols).
  static constexpr int kSmallChunk = 48;
  void MergeSmall(BpeScratch* scratch, std::vector<int32_t>* out) const;
  void EncodeChunk(std::string_view chunk, BpeScratch* scratch, std::vector<int32_t>* out) const;
  void EncodeChunkCached(std::string_view chunk, BpeScratch* scratch,
                         std::vector<int32_t>* out) const;

  // Vocabulary: strings in one arena, addressed by id; open-addressing index over them whose
  // slots keep 32 bits of the hash beside the id, so probes rarely touch the strings.
  static constexpr uint32_t kNoToken = UINT32_MAX;
  static constexpr uint64_t kFreeSlot = ~uint64_t{0};
  struct TokenRef {
    uint32_t off, len;  // len kNoToken: no such id
  };
  std::string arena_;
  std::vector<TokenRef> tokens_;
  std::vector<uint64_t> index_;  // hash tag << 32 | id, or kFreeSlot
  uint64_t index_mask_ = 0;

  std::vector<MergeSlot> merges_;
  uint64_t merge_mask_ = 0;
  size_t num_merges_ = 0;

  int32_t ascii_ids_[128];
  int32_t byte_ids_[256];
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;

  // Chunking (see the file comment): the cut marker and the tokens that contain it right after
  // another character, with that offset.
  bool chunking_ = false;
  std::string cut_marker_;
  std::vector<std::pair<std::string, size_t>> crossing_;

  // Chunk -> ids cache: per thread, direct-mapped (see EncodeChunkCached). Entries are tagged
  // with the hash XOR this model's salt, unique per process, so tokenizers never see each
  // other's entries.
  bool cache_enabled_ = false;
  uint64_t cache_salt_ = 0;
};

}  // namespace rw
