// Attention over the head-major KV cache (see ops.h): decode (AttendOne) and prefill
// (AttendBlock), built on one streaming core with an online softmax so any number of queries
// can share each chunk of K/V rows while it is hot in cache. Work is split across threads by
// KV head (and by query rows or position ranges); partial results of a split position range
// are merged with the usual log-sum-exp rescaling.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "base/bf16.h"
#include "base/check.h"

namespace rw::cpu {
namespace {

// Positions per chunk: the chunk's K and V rows (~128 KB each) stay in L2 while every query of
// the work item uses them.
int64_t ChunkPositions(int hd) {
  return std::clamp<int64_t>(32768 / hd, 16, 256);
}

// One query vector's running softmax: o accumulates Σ e^{s−m}·v, l = Σ e^{s−m}.
struct QueryState {
  const float* q;
  float* o;        // head_dim floats, zeroed by the caller
  int64_t lo, hi;  // logical key positions [lo, hi)
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
};

// Per-thread buffers for AttendCore.
struct CoreScratch {
  std::vector<float> s;  // [nq][chunk] scores, then probabilities
  std::vector<const float*> q;
  std::vector<float*> o;
  std::vector<int> active;
  void Reserve(int nq, int64_t chunk) {
    s.resize(static_cast<size_t>(nq * chunk));
    q.resize(static_cast<size_t>(nq));
    o.resize(static_cast<size_t>(nq));
    active.resize(static_cast<size_t>(nq));
  }
};

// Streams KV head h over the union of the queries' ranges, chunk by chunk (a chunk never
// crosses the ring's wrap point, so its rows are contiguous). Per chunk: scores of every query
// that sees part of it, an online-softmax update per query (positions outside its range get
// probability 0), then one P·V over the chunk for all of them.
void AttendCore(const detail::KernelTable& kt, const KvCacheView& kv, int h, QueryState* qs, int nq,
                float scale, CoreScratch& sc) {
  const int hd = kv.head_dim;
  const int64_t cap = kv.capacity, chunk = ChunkPositions(hd);
  sc.Reserve(nq, chunk);
  int64_t lo = qs[0].lo, hi = qs[0].hi;
  for (int j = 1; j < nq; ++j) {
    lo = std::min(lo, qs[j].lo);
    hi = std::max(hi, qs[j].hi);
  }
  // Element e of head h's rows, as bytes: the kernels for kv.type read them.
  const int64_t eb = KvTypeBytes(kv.type);
  const char* k_head = static_cast<const char*>(kv.k) + static_cast<int64_t>(h) * cap * hd * eb;
  const char* v_head = static_cast<const char*>(kv.v) + static_cast<int64_t>(h) * cap * hd * eb;
  for (int64_t c0 = lo; c0 < hi;) {
    const int64_t slot0 = c0 % cap;
    const int64_t c1 = std::min({hi, c0 + chunk, c0 + (cap - slot0)});
    const int64_t n = c1 - c0;
    int na = 0;
    for (int j = 0; j < nq; ++j) {
      if (qs[j].lo >= c1 || qs[j].hi <= c0) continue;
      sc.active[na] = j;
      sc.q[na] = qs[j].q;
      sc.o[na] = qs[j].o;
      ++na;
    }
    if (na > 0) {
      const char* k_rows = k_head + slot0 * hd * eb;
      switch (kv.type) {
        case KvType::kF32:
          kt.scores(sc.q.data(), na, reinterpret_cast<const float*>(k_rows), n, hd, scale,
                    sc.s.data(), chunk);
          break;
        case KvType::kBf16:
          kt.scores_bf16(sc.q.data(), na, reinterpret_cast<const uint16_t*>(k_rows), n, hd, scale,
                         sc.s.data(), chunk);
          break;
        case KvType::kF16:
          kt.scores_f16(sc.q.data(), na, reinterpret_cast<const uint16_t*>(k_rows), n, hd, scale,
                        sc.s.data(), chunk);
          break;
      }
      for (int a = 0; a < na; ++a) {
        QueryState& st = qs[sc.active[a]];
        float* row = sc.s.data() + a * chunk;
        const int64_t b = std::max(st.lo, c0) - c0, e = std::min(st.hi, c1) - c0;
        const float cm = kt.max(row + b, e - b);
        if (cm > st.m) {
          if (st.l > 0.0f) {
            const float f = std::exp(st.m - cm);
            kt.scale(st.o, f, hd);
            st.l *= f;
          }
          st.m = cm;
        }
        st.l += kt.exp_sub_sum(row + b, e - b, st.m);
        std::fill(row, row + b, 0.0f);
        std::fill(row + e, row + n, 0.0f);
      }
      const char* v_rows = v_head + slot0 * hd * eb;
      switch (kv.type) {
        case KvType::kF32:
          kt.pv(sc.s.data(), chunk, na, n, reinterpret_cast<const float*>(v_rows), hd, sc.o.data());
          break;
        case KvType::kBf16:
          kt.pv_bf16(sc.s.data(), chunk, na, n, reinterpret_cast<const uint16_t*>(v_rows), hd,
                     sc.o.data());
          break;
        case KvType::kF16:
          kt.pv_f16(sc.s.data(), chunk, na, n, reinterpret_cast<const uint16_t*>(v_rows), hd,
                    sc.o.data());
          break;
      }
    }
    c0 = c1;
  }
}

void CheckKv(int n_heads, const KvCacheView& kv) {
  CHECK_MSG(kv.n_kv_heads > 0 && n_heads > 0 && n_heads % kv.n_kv_heads == 0,
            "{} heads over {} kv heads", n_heads, kv.n_kv_heads);
  CHECK(kv.head_dim > 0 && kv.capacity > 0 && kv.k != nullptr && kv.v != nullptr);
}

}  // namespace

void KvStore(void* k_cache, void* v_cache, KvType type, int n_kv_heads, int head_dim,
             int64_t capacity, int64_t pos, const float* k, const float* v) {
  CHECK(pos >= 0 && capacity > 0);
  const int64_t slot = pos % capacity;
  auto store = [&](const float* src, void* cache, int64_t dst) {
    switch (type) {
      case KvType::kF32:
        std::copy(src, src + head_dim, static_cast<float*>(cache) + dst);
        break;
      case KvType::kBf16:
        for (int d = 0; d < head_dim; ++d)
          static_cast<uint16_t*>(cache)[dst + d] = F32ToBf16(src[d]);
        break;
      case KvType::kF16:
        for (int d = 0; d < head_dim; ++d)
          static_cast<uint16_t*>(cache)[dst + d] = F32ToF16(src[d]);
        break;
    }
  };
  for (int h = 0; h < n_kv_heads; ++h) {
    const int64_t dst = (h * capacity + slot) * head_dim;
    if (k != nullptr) store(k + h * head_dim, k_cache, dst);
    if (v != nullptr) store(v + h * head_dim, v_cache, dst);
  }
}

void AttendOne(const float* q, int n_heads, const KvCacheView& kv, int64_t pos_begin,
               int64_t pos_end, float scale, float* out, ThreadPool* pool) {
  CheckKv(n_heads, kv);
  CHECK_MSG(0 <= pos_begin && pos_begin < pos_end && pos_end - pos_begin <= kv.capacity,
            "positions [{}, {}) with capacity {}", pos_begin, pos_end, kv.capacity);
  const auto& kt = detail::Active();
  const int hd = kv.head_dim, n_kv = kv.n_kv_heads, rep = n_heads / n_kv;
  const int64_t len = pos_end - pos_begin;
  const int threads = pool != nullptr ? pool->size() : 1;
  // Split each head's positions only when there are fewer heads than threads, keeping at
  // least 512 positions per split.
  int64_t splits = 1;
  if (threads > n_kv) splits = std::min<int64_t>((threads + n_kv - 1) / n_kv, len / 512);
  splits = std::max<int64_t>(1, splits);
  const int64_t items = n_kv * splits;
  std::fill(out, out + static_cast<int64_t>(n_heads) * hd, 0.0f);
  // Split partials: o [items][rep][hd] plus m and l per query vector.
  std::vector<float> part_o, part_ml;
  if (splits > 1) {
    part_o.assign(static_cast<size_t>(items * rep * hd), 0.0f);
    part_ml.resize(static_cast<size_t>(items * rep * 2));
  }
  auto run = [&](size_t b, size_t e, int) {
    std::vector<QueryState> qs(static_cast<size_t>(rep));
    CoreScratch sc;
    for (size_t item = b; item < e; ++item) {
      const int h = static_cast<int>(item / splits);
      const int64_t sp = static_cast<int64_t>(item % splits);
      const int64_t lo = pos_begin + len * sp / splits, hi = pos_begin + len * (sp + 1) / splits;
      for (int j = 0; j < rep; ++j) {
        const int64_t qi = static_cast<int64_t>(h) * rep + j;
        float* o = splits > 1 ? part_o.data() + (item * rep + j) * hd : out + qi * hd;
        qs[static_cast<size_t>(j)] = QueryState{q + qi * hd, o, lo, hi};
      }
      AttendCore(kt, kv, h, qs.data(), rep, scale, sc);
      for (int j = 0; j < rep; ++j) {
        const QueryState& st = qs[static_cast<size_t>(j)];
        if (splits == 1) {
          kt.scale(st.o, 1.0f / st.l, hd);
        } else {
          part_ml[(item * rep + j) * 2] = st.m;
          part_ml[(item * rep + j) * 2 + 1] = st.l;
        }
      }
    }
  };
  if (pool != nullptr && items > 1 && len * hd * n_kv >= 16384) {
    // Each item its own chunk: a thread slowed by its core's other hardware thread takes fewer.
    pool->ParallelFor(static_cast<size_t>(items), 1, run, static_cast<int>(items));
  } else {
    run(0, static_cast<size_t>(items), 0);
  }
  if (splits == 1) return;
  // Merge: out = Σ_s e^{m_s−M}·o_s / Σ_s e^{m_s−M}·l_s.
  for (int h = 0; h < n_kv; ++h) {
    for (int r = 0; r < rep; ++r) {
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t sp = 0; sp < splits; ++sp)
        mx = std::max(mx, part_ml[((h * splits + sp) * rep + r) * 2]);
      float* o = out + (static_cast<int64_t>(h) * rep + r) * hd;
      float l = 0.0f;
      for (int64_t sp = 0; sp < splits; ++sp) {
        const int64_t at = (h * splits + sp) * rep + r;
        const float f = std::exp(part_ml[at * 2] - mx);
        l += f * part_ml[at * 2 + 1];
        kt.axpy(o, f, part_o.data() + at * hd, hd);
      }
      kt.scale(o, 1.0f / l, hd);
    }
  }
}

void AttendBlock(const float* q, int64_t m, int64_t q_pos0, int n_heads, const KvCacheView& kv,
                 int64_t window, float scale, float* out, ThreadPool* pool) {
  CheckKv(n_heads, kv);
  CHECK(m >= 0 && q_pos0 >= 0 && window >= 0);
  if (m == 0) return;
  const int64_t oldest = window > 0 ? std::max<int64_t>(0, q_pos0 - window + 1) : 0;
  CHECK_MSG(q_pos0 + m - oldest <= kv.capacity, "KV capacity {} cannot hold positions [{}, {})",
            kv.capacity, oldest, q_pos0 + m);
  const auto& kt = detail::Active();
  const int hd = kv.head_dim, n_kv = kv.n_kv_heads, rep = n_heads / n_kv;
  const int64_t row = static_cast<int64_t>(n_heads) * hd;
  // Items: (KV head, block of query rows). The block's rows × rep heads (up to 64 query
  // vectors) share each K/V chunk.
  const int64_t rows_per_item = std::clamp<int64_t>(64 / rep, 1, 16);
  const int64_t row_blocks = (m + rows_per_item - 1) / rows_per_item;
  const int64_t items = n_kv * row_blocks;
  std::fill(out, out + m * row, 0.0f);
  auto run = [&](size_t b, size_t e, int) {
    std::vector<QueryState> qs(static_cast<size_t>(rows_per_item * rep));
    CoreScratch sc;
    for (size_t item = b; item < e; ++item) {
      const int h = static_cast<int>(item / row_blocks);
      const int64_t i0 = static_cast<int64_t>(item % row_blocks) * rows_per_item;
      const int64_t i1 = std::min(m, i0 + rows_per_item);
      int nq = 0;
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t p = q_pos0 + i;
        const int64_t lo = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
        for (int r = 0; r < rep; ++r) {
          const int64_t off = i * row + (static_cast<int64_t>(h) * rep + r) * hd;
          qs[static_cast<size_t>(nq++)] = QueryState{q + off, out + off, lo, p + 1};
        }
      }
      AttendCore(kt, kv, h, qs.data(), nq, scale, sc);
      for (int j = 0; j < nq; ++j) {
        const QueryState& st = qs[static_cast<size_t>(j)];
        kt.scale(st.o, 1.0f / st.l, hd);
      }
    }
  };
  if (pool != nullptr && items > 1) {
    // Items differ in length (causal) and threads in speed: each item is its own chunk.
    pool->ParallelFor(static_cast<size_t>(items), 1, run, static_cast<int>(items));
  } else {
    run(0, static_cast<size_t>(items), 0);
  }
}

}  // namespace rw::cpu
