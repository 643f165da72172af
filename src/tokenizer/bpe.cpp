#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>

#include "base/check.h"
#include "base/hash.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/utf8.h"

namespace rw {
namespace {

constexpr int32_t kMaxId = 1 << 24;  // far above any real vocabulary; guards absurd allocations
// One cache line per entry: a word of up to 22 bytes and up to 8 ids. 4 MiB per thread that
// encodes, allocated on first use.
struct CacheEntry {
  uint64_t tag;            // hash of the key XOR the model's salt
  uint8_t key_len, n_ids;  // n_ids 0: empty
  char key[22];
  int32_t ids[8];
};
static_assert(sizeof(CacheEntry) == 64);
constexpr size_t kCacheEntries = 1 << 16;  // ~95% hits on English prose (87% at 1 << 14)
thread_local std::unique_ptr<CacheEntry[]> tls_cache;
std::atomic<uint64_t> next_cache_salt{1};

uint64_t TableSize(size_t n) {
  uint64_t size = 16;
  while (size < 2 * static_cast<uint64_t>(n)) size <<= 1;
  return size;
}

inline uint64_t MixPair(uint64_t key) {
  key ^= key >> 29;
  key *= 0x9E3779B97F4A7C15ull;
  return key ^ (key >> 32);
}

// Hash of a merge pair (before masking to the table size).
inline uint64_t MergeHome(int32_t left, int32_t right) {
  return MixPair((static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
                 static_cast<uint32_t>(right));
}

struct CandidateGreater {
  bool operator()(const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) const {
    return a.key > b.key;
  }
};

}  // namespace

Result<BpeModel> BpeModel::Build(StringList vocab, const std::vector<int32_t>& ids,
                                 const StringList& merges, const BpeOptions& options,
                                 const std::string& source) {
  BpeModel m;
  const size_t n = vocab.size();
  int32_t max_id = -1;
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= kMaxId) {
      return Error(ErrorCode::kCorrupt, "{}: model.vocab: token {} has invalid id {}", source,
                   JsonQuote(vocab[i]), ids[i]);
    }
    max_id = std::max(max_id, ids[i]);
  }
  m.tokens_.assign(static_cast<size_t>(max_id + 1), TokenRef{0, kNoToken});
  for (size_t i = 0; i < n; ++i) {
    TokenRef& t = m.tokens_[static_cast<size_t>(ids[i])];
    if (t.len != kNoToken) {
      return Error(ErrorCode::kCorrupt, "{}: model.vocab: id {} is used by both {} and {}", source,
                   ids[i], JsonQuote(std::string_view(vocab.arena).substr(t.off, t.len)),
                   JsonQuote(vocab[i]));
    }
    t = TokenRef{vocab.offsets[i], vocab.offsets[i + 1] - vocab.offsets[i]};
  }
  m.arena_ = std::move(vocab.arena);

  // Index token text -> id.
  m.index_.assign(TableSize(n), kFreeSlot);
  m.index_mask_ = m.index_.size() - 1;
  for (int32_t id = 0; id <= max_id; ++id) {
    if (!m.Has(id)) continue;
    std::string_view tok = m.Token(id);
    uint64_t h = Xxh3_64(tok.data(), tok.size());
    // Prefetch the home slot of a token a little ahead (loading is cache-miss bound).
    if (id + 16 <= max_id && m.Has(id + 16)) {
      std::string_view ahead = m.Token(id + 16);
      __builtin_prefetch(&m.index_[Xxh3_64(ahead.data(), ahead.size()) & m.index_mask_]);
    }
    uint64_t tag = h >> 32;
    uint64_t slot = h & m.index_mask_;
    for (; m.index_[slot] != kFreeSlot; slot = (slot + 1) & m.index_mask_) {
      int32_t other = static_cast<int32_t>(m.index_[slot] & 0xFFFFFFFFu);
      if ((m.index_[slot] >> 32) == tag && m.Token(other) == tok) {
        return Error(ErrorCode::kCorrupt, "{}: model.vocab: token {} appears twice (ids {} and {})",
                     source, JsonQuote(tok), other, id);
      }
    }
    m.index_[slot] = (tag << 32) | static_cast<uint32_t>(id);
  }

  for (int c = 0; c < 128; ++c) {
    char ch = static_cast<char>(c);
    m.ascii_ids_[c] = m.Lookup(std::string_view(&ch, 1));
  }
  for (int b = 0; b < 256; ++b) m.byte_ids_[b] = m.Lookup(fmt::format("<0x{:02X}>", b));
  m.byte_fallback_ = options.byte_fallback;
  m.fuse_unk_ = options.fuse_unk;
  m.ignore_merges_ = options.ignore_merges;
  if (options.unk_token) {
    m.unk_id_ = m.Lookup(*options.unk_token);
    if (m.unk_id_ < 0) {
      return Error(ErrorCode::kCorrupt, "{}: model.unk_token {} is not in model.vocab", source,
                   JsonQuote(*options.unk_token));
    }
  }

  // Merges: (left id, right id) -> (rank, id of left+right). A repeated pair keeps its last rank,
  // as tokenizers' map construction does.
  const size_t num_merges = merges.size() / 2;
  m.merges_.assign(TableSize(num_merges), MergeSlot{kEmpty, 0, 0});
  m.merge_mask_ = m.merges_.size() - 1;
  // Byte tokens and unk stand for text they do not spell, so merges on them could build tokens
  // that chunking's text-based check cannot see; such files are not chunked.
  bool merges_use_stand_ins = false;
  std::vector<bool> is_stand_in(static_cast<size_t>(max_id + 1), false);
  for (int b = 0; b < 256; ++b) {
    if (m.byte_ids_[b] >= 0) is_stand_in[static_cast<size_t>(m.byte_ids_[b])] = true;
  }
  if (m.unk_id_ >= 0) is_stand_in[static_cast<size_t>(m.unk_id_)] = true;
  // Resolved in batches: the lookups are memory-latency bound, and a batch lets their cache
  // misses overlap (LookupBatch), which makes loading ~3x faster.
  constexpr size_t kBatch = 64;
  std::vector<std::string> joined(kBatch);
  std::vector<std::string_view> keys(3 * kBatch);
  std::vector<int32_t> found(3 * kBatch);
  for (size_t k0 = 0; k0 < num_merges; k0 += kBatch) {
    const size_t nb = std::min(kBatch, num_merges - k0);
    for (size_t i = 0; i < nb; ++i) {
      std::string_view a = merges[2 * (k0 + i)], b = merges[2 * (k0 + i) + 1];
      joined[i].assign(a);
      joined[i].append(b);
      keys[3 * i] = a;
      keys[3 * i + 1] = b;
      keys[3 * i + 2] = joined[i];
    }
    m.LookupBatch(keys.data(), 3 * nb, found.data());
    for (size_t i = 0; i < nb; ++i) {
      const size_t k = k0 + i;
      for (int part = 0; part < 3; ++part) {
        if (found[3 * i + part] >= 0) continue;
        std::string_view a = keys[3 * i], b = keys[3 * i + 1];
        if (part < 2) {
          return Error(ErrorCode::kCorrupt,
                       "{}: model.merges[{}] ({} {}): {} is not in model.vocab", source, k,
                       JsonQuote(a), JsonQuote(b), JsonQuote(keys[3 * i + part]));
        }
        return Error(ErrorCode::kCorrupt,
                     "{}: model.merges[{}] ({} {}): the merged token {} is not in model.vocab",
                     source, k, JsonQuote(a), JsonQuote(b), JsonQuote(joined[i]));
      }
      int32_t ia = found[3 * i], ib = found[3 * i + 1];
      merges_use_stand_ins |=
          is_stand_in[static_cast<size_t>(ia)] || is_stand_in[static_cast<size_t>(ib)];
      __builtin_prefetch(&m.merges_[MergeHome(ia, ib) & m.merge_mask_]);
    }
    for (size_t i = 0; i < nb; ++i)
      m.InsertMerge(found[3 * i], found[3 * i + 1], static_cast<int32_t>(k0 + i), found[3 * i + 2]);
  }
  m.num_merges_ = num_merges;

  if (!merges_use_stand_ins) m.SetUpChunking(options);
  m.cache_enabled_ = options.enable_cache;
  m.cache_salt_ = next_cache_salt.fetch_add(1) * 0x9E3779B97F4A7C15ull;
  return m;
}

int32_t BpeModel::Lookup(std::string_view token) const {
  if (index_.empty()) return -1;
  uint64_t h = Xxh3_64(token.data(), token.size());
  uint64_t tag = h >> 32;
  for (uint64_t slot = h & index_mask_;; slot = (slot + 1) & index_mask_) {
    uint64_t e = index_[slot];
    if (e == kFreeSlot) return -1;
    if ((e >> 32) != tag) continue;
    int32_t id = static_cast<int32_t>(e & 0xFFFFFFFFu);
    if (Token(id) == token) return id;
  }
}

void BpeModel::LookupBatch(const std::string_view* keys, size_t n, int32_t* out) const {
  // Stages, each over the whole batch so that the misses of different keys overlap: hash and
  // fetch the home slot; find the first slot with a matching tag and fetch its token entry; fetch
  // the token text; compare (falling back to a full probe when the first candidate is wrong).
  uint64_t hashes[256];
  int32_t cand[256];
  CHECK(n <= 256);
  for (size_t i = 0; i < n; ++i) {
    hashes[i] = Xxh3_64(keys[i].data(), keys[i].size());
    __builtin_prefetch(&index_[hashes[i] & index_mask_]);
  }
  for (size_t i = 0; i < n; ++i) {
    cand[i] = -1;
    uint64_t tag = hashes[i] >> 32;
    for (uint64_t slot = hashes[i] & index_mask_;; slot = (slot + 1) & index_mask_) {
      uint64_t e = index_[slot];
      if (e == kFreeSlot) break;
      if ((e >> 32) == tag) {
        cand[i] = static_cast<int32_t>(e & 0xFFFFFFFFu);
        __builtin_prefetch(&tokens_[static_cast<size_t>(cand[i])]);
        break;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (cand[i] >= 0) __builtin_prefetch(arena_.data() + tokens_[static_cast<size_t>(cand[i])].off);
  }
  for (size_t i = 0; i < n; ++i) {
    out[i] = cand[i] >= 0 && Token(cand[i]) == keys[i] ? cand[i] : Lookup(keys[i]);
  }
}

const BpeModel::MergeSlot* BpeModel::FindMerge(int32_t left, int32_t right) const {
  uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  uint64_t slot = MixPair(key) & merge_mask_;
  while (true) {
    const MergeSlot& s = merges_[slot];
    if (s.key == key) return &s;
    if (s.key == kEmpty) return nullptr;
    slot = (slot + 1) & merge_mask_;
  }
}

void BpeModel::InsertMerge(int32_t left, int32_t right, int32_t rank, int32_t new_id) {
  uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  uint64_t slot = MixPair(key) & merge_mask_;
  while (merges_[slot].key != kEmpty && merges_[slot].key != key) slot = (slot + 1) & merge_mask_;
  merges_[slot] = MergeSlot{key, rank, new_id};
}

void BpeModel::SetUpChunking(const BpeOptions& options) {
  chunking_ = false;
  // ignore_merges looks the whole word up first, so the word must stay whole.
  if (!options.enable_chunking || ignore_merges_) return;
  const std::string marker = "\xE2\x96\x81";  // "▁", what Gemma's normalizer puts for spaces
  if (Lookup(marker) < 0) return;
  crossing_.clear();
  for (int32_t id = 0; id < id_limit(); ++id) {
    std::string_view tok = Token(id);
    for (size_t k = tok.find(marker, 1); k != std::string_view::npos;
         k = tok.find(marker, k + marker.size())) {
      bool after_marker =
          k >= marker.size() && tok.substr(k - marker.size(), marker.size()) == marker;
      if (!after_marker) crossing_.emplace_back(std::string(tok), k);
    }
    if (crossing_.size() > 256) return;  // a vocabulary of multi-word tokens: do not chunk
  }
  cut_marker_ = marker;
  chunking_ = true;
}

bool BpeModel::IsCut(std::string_view word, size_t pos) const {
  const size_t m = cut_marker_.size();
  if (pos == 0) return false;
  if (pos >= m && word.substr(pos - m, m) == cut_marker_) return false;  // inside a run
  for (const auto& [tok, k] : crossing_) {
    if (pos >= k && pos - k + tok.size() <= word.size() && word.substr(pos - k, tok.size()) == tok)
      return false;
  }
  return true;
}

void BpeModel::Encode(std::string_view word, BpeScratch* scratch, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (!chunking_) {
    EncodeChunkCached(word, scratch, out);
    return;
  }
  size_t start = 0;
  for (size_t p = word.find(cut_marker_, 1); p != std::string_view::npos;
       p = word.find(cut_marker_, p + cut_marker_.size())) {
    if (p > start && IsCut(word, p)) {
      EncodeChunkCached(word.substr(start, p - start), scratch, out);
      start = p;
    }
  }
  EncodeChunkCached(word.substr(start), scratch, out);
}

void BpeModel::EncodeChunkCached(std::string_view chunk, BpeScratch* scratch,
                                 std::vector<int32_t>* out) const {
  if (!cache_enabled_ || chunk.size() > sizeof(CacheEntry::key)) {
    EncodeChunk(chunk, scratch, out);
    return;
  }
  if (!tls_cache) tls_cache.reset(new CacheEntry[kCacheEntries]());  // zeroed: all empty
  const uint64_t tag = Xxh3_64(chunk.data(), chunk.size()) ^ cache_salt_;
  CacheEntry& e = tls_cache[tag & (kCacheEntries - 1)];
  if (e.n_ids > 0 && e.tag == tag && e.key_len == chunk.size() &&
      std::memcmp(e.key, chunk.data(), chunk.size()) == 0) {
    out->insert(out->end(), e.ids, e.ids + e.n_ids);
    return;
  }
  const size_t first = out->size();
  EncodeChunk(chunk, scratch, out);
  const size_t n = out->size() - first;
  if (n == 0 || n > std::size(e.ids)) return;
  e.tag = tag;
  e.key_len = static_cast<uint8_t>(chunk.size());
  e.n_ids = static_cast<uint8_t>(n);
  std::memcpy(e.key, chunk.data(), chunk.size());
  std::copy(out->begin() + static_cast<ptrdiff_t>(first), out->end(), e.ids);
}

void BpeModel::MergeSmall(BpeScratch* scratch, std::vector<int32_t>* out) const {
  // Same choice as the heap loop (lowest rank, then leftmost), by scanning a compact array: for
  // the few symbols of a word this beats heap upkeep.
  int32_t ids[kSmallChunk];
  uint32_t ranks[kSmallChunk];  // ranks[i]: pair (ids[i], ids[i+1]); UINT32_MAX = no merge
  int32_t new_ids[kSmallChunk];
  int n = static_cast<int>(scratch->symbols.size());
  for (int i = 0; i < n; ++i) ids[i] = scratch->symbols[static_cast<size_t>(i)].id;
  auto rank_of = [&](int i) {
    const MergeSlot* ms = FindMerge(ids[i], ids[i + 1]);
    if (ms == nullptr) return UINT32_MAX;
    new_ids[i] = ms->new_id;
    return static_cast<uint32_t>(ms->rank);
  };
  for (int i = 0; i + 1 < n; ++i) ranks[i] = rank_of(i);
  while (n > 1) {
    int best = -1;
    uint32_t best_rank = UINT32_MAX;
    for (int i = 0; i + 1 < n; ++i) {
      if (ranks[i] < best_rank) {
        best_rank = ranks[i];
        best = i;
      }
    }
    if (best < 0) break;
    ids[best] = new_ids[best];
    for (int i = best + 1; i + 1 < n; ++i) {
      ids[i] = ids[i + 1];
      ranks[i] = ranks[i + 1];
      new_ids[i] = new_ids[i + 1];
    }
    --n;
    if (best > 0) ranks[best - 1] = rank_of(best - 1);
    if (best + 1 < n) ranks[best] = rank_of(best);
  }
  out->insert(out->end(), ids, ids + n);
}

void BpeModel::EncodeChunk(std::string_view w, BpeScratch* scratch,
                           std::vector<int32_t>* out) const {
  if (w.empty()) return;
  if (ignore_merges_) {
    int32_t id = Lookup(w);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  auto& sym = scratch->symbols;
  sym.clear();
  auto add = [&](int32_t id) { sym.push_back({id, -1, -1}); };

  // Initial symbols: one per character, byte tokens for characters outside the vocabulary, else
  // unk (consecutive unks fused when fuse_unk). Invalid UTF-8 bytes are characters of their own
  // that are never in the vocabulary, so they become byte tokens.
  int32_t pending_unk = -1;
  for (size_t i = 0; i < w.size();) {
    uint8_t c = static_cast<uint8_t>(w[i]);
    size_t len = 1;
    int32_t id;
    if (c < 0x80) {
      id = ascii_ids_[c];
    } else {
      len = utf8::ValidCharLen(w.substr(i));
      if (len == 0) {
        len = 1;
        id = -1;
      } else {
        id = Lookup(w.substr(i, len));
      }
    }
    if (id >= 0) {
      if (pending_unk >= 0) add(pending_unk);
      pending_unk = -1;
      add(id);
    } else {
      bool bytes_ok = byte_fallback_;
      for (size_t j = 0; bytes_ok && j < len; ++j)
        bytes_ok = byte_ids_[static_cast<uint8_t>(w[i + j])] >= 0;
      if (bytes_ok) {
        // Like tokenizers, a pending unk is not flushed before byte tokens.
        for (size_t j = 0; j < len; ++j) add(byte_ids_[static_cast<uint8_t>(w[i + j])]);
      } else if (unk_id_ >= 0) {
        if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
        pending_unk = unk_id_;
      }
      // Without an unk token the character is dropped, as tokenizers does.
    }
    i += len;
  }
  if (pending_unk >= 0) add(pending_unk);

  const int32_t n = static_cast<int32_t>(sym.size());
  if (n == 0) return;
  if (n == 1) {
    out->push_back(sym[0].id);
    return;
  }
  if (n <= kSmallChunk) {
    MergeSmall(scratch, out);
    return;
  }
  for (int32_t i = 0; i < n; ++i) {
    sym[static_cast<size_t>(i)].prev = i - 1;
    sym[static_cast<size_t>(i)].next = i + 1 < n ? i + 1 : -1;
  }

  auto& heap = scratch->heap;
  heap.clear();
  auto push = [&](int32_t pos, int32_t left, int32_t right) {
    const MergeSlot* ms = FindMerge(left, right);
    if (ms == nullptr) return;
    heap.push_back({(static_cast<uint64_t>(ms->rank) << 32) | static_cast<uint32_t>(pos), left,
                    right, ms->new_id});
    std::push_heap(heap.begin(), heap.end(), CandidateGreater());
  };
  for (int32_t i = 0; i + 1 < n; ++i)
    push(i, sym[static_cast<size_t>(i)].id, sym[static_cast<size_t>(i + 1)].id);

  // Pop the lowest (rank, position). An entry is stale when either side has changed since it was
  // pushed; a symbol's id only grows (or dies, -1), so comparing both ids detects that exactly.
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), CandidateGreater());
    BpeScratch::Candidate top = heap.back();
    heap.pop_back();
    int32_t pos = static_cast<int32_t>(top.key & 0xFFFFFFFFu);
    BpeScratch::Symbol& l = sym[static_cast<size_t>(pos)];
    if (l.id != top.left || l.next < 0) continue;
    BpeScratch::Symbol& r = sym[static_cast<size_t>(l.next)];
    if (r.id != top.right) continue;
    l.id = top.new_id;
    r.id = -1;
    l.next = r.next;
    if (l.next >= 0) sym[static_cast<size_t>(l.next)].prev = pos;
    if (l.prev >= 0) push(l.prev, sym[static_cast<size_t>(l.prev)].id, l.id);
    if (l.next >= 0) push(pos, l.id, sym[static_cast<size_t>(l.next)].id);
  }
  // Symbol 0 is never the right side of a merge, so the list starts there.
  for (int32_t i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next)
    out->push_back(sym[static_cast<size_t>(i)].id);
}

}  // namespace rw
