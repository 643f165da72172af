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

// Streams KV head h over the union of the queries' ranges, chunk by chunk. Per chunk: scores of
// every query that sees part of it, an online-softmax update per query (positions outside its
// range get probability 0), then one P·V over the chunk for all of them.
//
// Chunks are cut at multiples of the chunk length in absolute positions, never where the union
// starts, and a chunk that crosses the ring's wrap point runs as two pieces of contiguous rows
// into the same scores: so the part of a chunk each query sees, and with it every rounding of
// its softmax, depends only on that query's own range, not on which queries share the call nor
// on the ring's capacity. (The kernels' per-element results do not depend on how many queries or
// rows a call has either; kernels.h.) That is what makes a verify row the decode row bitwise.
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
    const int64_t c1 = std::min(hi, (c0 / chunk + 1) * chunk);
    const int64_t n = c1 - c0;
    const int64_t slot0 = c0 % cap;
    const int64_t n0 = std::min(n, cap - slot0);  // rows before the wrap point
    int na = 0;
    for (int j = 0; j < nq; ++j) {
      if (qs[j].lo >= c1 || qs[j].hi <= c0) continue;
      sc.active[na] = j;
      sc.q[na] = qs[j].q;
      sc.o[na] = qs[j].o;
      ++na;
    }
    if (na > 0) {
      // Rows [c0, c1) of the ring: up to its wrap point from slot0, the rest from slot 0.
      auto scores = [&](int64_t slot, int64_t rows, float* out) {
        const char* k_rows = k_head + slot * hd * eb;
        switch (kv.type) {
          case KvType::kF32:
            kt.scores(sc.q.data(), na, reinterpret_cast<const float*>(k_rows), rows, hd, scale, out,
                      chunk);
            break;
          case KvType::kBf16:
            kt.scores_bf16(sc.q.data(), na, reinterpret_cast<const uint16_t*>(k_rows), rows, hd,
                           scale, out, chunk);
            break;
          case KvType::kF16:
            kt.scores_f16(sc.q.data(), na, reinterpret_cast<const uint16_t*>(k_rows), rows, hd,
                          scale, out, chunk);
            break;
        }
      };
      scores(slot0, n0, sc.s.data());
      if (n0 < n) scores(0, n - n0, sc.s.data() + n0);
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
      auto pv = [&](const float* p, int64_t slot, int64_t rows) {
        const char* v_rows = v_head + slot * hd * eb;
        switch (kv.type) {
          case KvType::kF32:
            kt.pv(p, chunk, na, rows, reinterpret_cast<const float*>(v_rows), hd, sc.o.data());
            break;
          case KvType::kBf16:
            kt.pv_bf16(p, chunk, na, rows, reinterpret_cast<const uint16_t*>(v_rows), hd,
                       sc.o.data());
            break;
          case KvType::kF16:
            kt.pv_f16(p, chunk, na, rows, reinterpret_cast<const uint16_t*>(v_rows), hd,
                      sc.o.data());
            break;
        }
      };
      pv(sc.s.data(), slot0, n0);
      if (n0 < n) pv(sc.s.data() + n0, 0, n - n0);
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

namespace {

// The exact path's unit of work along the positions: a query's range is cut at multiples of
// this (absolute positions), each piece streamed by one work item, and the pieces' partial
// softmaxes merged in ascending order. The cut depends only on the query's range, so one
// query gives the same bits alone (decode), among a block's rows (verify), and on any number of
// threads. 512: the split the old decode path kept as a minimum per thread.
constexpr int64_t kSegment = 512;

// Rows i < m, row i attending to [lo[i], hi[i]); q and out are [m][n_heads][hd]. Items are
// (KV head, segment), each streaming its K/V rows once for every query of the block that
// reaches into it. A row within one segment is written and normalized in place; a row that
// spans several gets per-segment partials (o, max, sum), merged afterwards:
// out = Σ_s e^{m_s−M}·o_s / Σ_s e^{m_s−M}·l_s, segments in ascending order.
void AttendRows(const float* q, int64_t m, const int64_t* lo, const int64_t* hi, int n_heads,
                const KvCacheView& kv, float scale, float* out, ThreadPool* pool) {
  const auto& kt = detail::Active();
  const int hd = kv.head_dim, n_kv = kv.n_kv_heads, rep = n_heads / n_kv;
  const int64_t row = static_cast<int64_t>(n_heads) * hd;
  int64_t first = lo[0] / kSegment, last = (hi[0] - 1) / kSegment, len = 0;
  bool any_split = false;
  for (int64_t i = 0; i < m; ++i) {
    first = std::min(first, lo[i] / kSegment);
    last = std::max(last, (hi[i] - 1) / kSegment);
    any_split |= lo[i] / kSegment != (hi[i] - 1) / kSegment;
    len = std::max(len, hi[i] - lo[i]);
  }
  const int64_t segs = last - first + 1, items = n_kv * segs;
  auto split = [&](int64_t i) { return lo[i] / kSegment != (hi[i] - 1) / kSegment; };
  std::fill(out, out + m * row, 0.0f);
  // Partials [segment][row][head][hd] and [segment][row][head][2], for rows that span segments.
  // (The caller's buffers; workers reach them through these pointers, not by name.)
  thread_local std::vector<float> part_o_buf, part_ml_buf;
  if (any_split) {
    part_o_buf.resize(static_cast<size_t>(segs * m * row));
    part_ml_buf.resize(static_cast<size_t>(segs * m * n_heads * 2));
  }
  float* const part_o = part_o_buf.data();
  float* const part_ml = part_ml_buf.data();
  auto run = [&](size_t b, size_t e, int) {
    std::vector<QueryState> qs(static_cast<size_t>(m * rep));
    CoreScratch sc;
    for (size_t item = b; item < e; ++item) {
      const int h = static_cast<int>(item / segs);
      const int64_t sg = static_cast<int64_t>(item % segs);
      const int64_t s_lo = (first + sg) * kSegment, s_hi = s_lo + kSegment;
      int nq = 0;
      for (int64_t i = 0; i < m; ++i) {
        const int64_t a = std::max(lo[i], s_lo), z = std::min(hi[i], s_hi);
        if (a >= z) continue;
        for (int r = 0; r < rep; ++r) {
          const int64_t head = static_cast<int64_t>(h) * rep + r;
          float* o = out + i * row + head * hd;
          if (split(i)) {
            o = part_o + (sg * m + i) * row + head * hd;
            std::fill(o, o + hd, 0.0f);
          }
          qs[static_cast<size_t>(nq++)] = QueryState{q + i * row + head * hd, o, a, z};
        }
      }
      if (nq == 0) continue;
      AttendCore(kt, kv, h, qs.data(), nq, scale, sc);
      for (int j = 0; j < nq; ++j) {
        const QueryState& st = qs[static_cast<size_t>(j)];
        const int64_t off = st.q - q, i = off / row, head = (off % row) / hd;
        if (!split(i)) {
          kt.scale(st.o, 1.0f / st.l, hd);
        } else {
          float* ml = part_ml + ((sg * m + i) * n_heads + head) * 2;
          ml[0] = st.m;
          ml[1] = st.l;
        }
      }
    }
  };
  if (pool != nullptr && items > 1 && len * hd * n_kv * m >= 16384) {
    // Each item its own chunk: a thread slowed by its core's other hardware thread takes fewer.
    pool->ParallelFor(static_cast<size_t>(items), 1, run, static_cast<int>(items));
  } else {
    run(0, static_cast<size_t>(items), 0);
  }
  if (!any_split) return;
  for (int64_t i = 0; i < m; ++i) {
    if (!split(i)) continue;
    const int64_t s0 = lo[i] / kSegment - first, s1 = (hi[i] - 1) / kSegment - first;
    for (int head = 0; head < n_heads; ++head) {
      auto ml = [&](int64_t sg) { return part_ml + ((sg * m + i) * n_heads + head) * 2; };
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t sg = s0; sg <= s1; ++sg) mx = std::max(mx, ml(sg)[0]);
      float* o = out + i * row + static_cast<int64_t>(head) * hd;
      float l = 0.0f;
      for (int64_t sg = s0; sg <= s1; ++sg) {
        const float f = std::exp(ml(sg)[0] - mx);
        l += f * ml(sg)[1];
        kt.axpy(o, f, part_o + (sg * m + i) * row + static_cast<int64_t>(head) * hd, hd);
      }
      kt.scale(o, 1.0f / l, hd);
    }
  }
}

}  // namespace

void AttendOne(const float* q, int n_heads, const KvCacheView& kv, int64_t pos_begin,
               int64_t pos_end, float scale, float* out, ThreadPool* pool) {
  CheckKv(n_heads, kv);
  CHECK_MSG(0 <= pos_begin && pos_begin < pos_end && pos_end - pos_begin <= kv.capacity,
            "positions [{}, {}) with capacity {}", pos_begin, pos_end, kv.capacity);
  AttendRows(q, 1, &pos_begin, &pos_end, n_heads, kv, scale, out, pool);
}

void AttendBlock(const float* q, int64_t m, int64_t q_pos0, int n_heads, const KvCacheView& kv,
                 int64_t window, float scale, float* out, ThreadPool* pool) {
  CheckKv(n_heads, kv);
  CHECK(m >= 0 && q_pos0 >= 0 && window >= 0);
  if (m == 0) return;
  const int64_t oldest = window > 0 ? std::max<int64_t>(0, q_pos0 - window + 1) : 0;
  CHECK_MSG(q_pos0 + m - oldest <= kv.capacity, "KV capacity {} cannot hold positions [{}, {})",
            kv.capacity, oldest, q_pos0 + m);
  if (m <= kExactRows) {
    // A verify: every row as AttendOne computes it.
    int64_t lo[kExactRows], hi[kExactRows];
    for (int64_t i = 0; i < m; ++i) {
      lo[i] = window > 0 ? std::max<int64_t>(0, q_pos0 + i - window + 1) : 0;
      hi[i] = q_pos0 + i + 1;
    }
    AttendRows(q, m, lo, hi, n_heads, kv, scale, out, pool);
    return;
  }
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
