#include "runtime/reference_forward.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "format/model_dir.h"

namespace rw::test {
namespace {

using Vec = std::vector<double>;
using Mat = std::vector<Vec>;  // [rows][cols]

double Bf16(const uint8_t* p, int64_t i) {
  uint16_t b;
  std::memcpy(&b, p + 2 * i, 2);
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Dequantizes a tensor by the format definition: f32, bf16, or affine (uint32 words, LSB-first,
// w = scale·q + bias per group, in fp32).
Mat Decode(const uint8_t* base, const TensorDesc& t) {
  const int64_t rows = t.shape.size() >= 2 ? t.shape[0] : 1, cols = t.shape.back();
  Mat w(rows, Vec(cols));
  const uint8_t* d = base + t.data.offset;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      if (t.type == TensorType::kF32) {
        float f;
        std::memcpy(&f, d + 4 * i, 4);
        w[r][c] = f;
      } else if (t.type == TensorType::kBf16) {
        w[r][c] = Bf16(d, i);
      } else {
        const int per = 32 / t.bits;
        uint32_t word;
        std::memcpy(&word, d + 4 * (r * (cols / per) + c / per), 4);
        const uint32_t q = (word >> ((c % per) * t.bits)) & ((1u << t.bits) - 1);
        const int64_t g = r * (cols / t.group_size) + c / t.group_size;
        const float s = static_cast<float>(Bf16(base + t.scales.offset, g));
        const float b = static_cast<float>(Bf16(base + t.biases.offset, g));
        w[r][c] = static_cast<float>(s * static_cast<float>(q) + b);
      }
    }
  return w;
}

Vec Row(const Mat& m) {
  return m[0];
}

Vec MatVec(const Mat& w, const Vec& x) {
  Vec y(w.size(), 0.0);
  for (size_t r = 0; r < w.size(); ++r)
    for (size_t c = 0; c < x.size(); ++c) y[r] += w[r][c] * x[c];
  return y;
}

Vec Rms(const Vec& x, const Vec* w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * (w ? (*w)[i] : 1.0);
  return y;
}

double Gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// One head of length d at position p; NeoX pairs (i, i + d/2).
void Rope(double* x, int d, int64_t p, const Vec& inv) {
  for (int i = 0; i < d / 2; ++i) {
    const double a = static_cast<double>(p) * inv[i], c = std::cos(a), s = std::sin(a);
    const double x0 = x[i], x1 = x[i + d / 2];
    x[i] = x0 * c - x1 * s;
    x[i + d / 2] = x1 * c + x0 * s;
  }
}

}  // namespace

std::vector<double> ReferenceInvFreq(int d, double theta, bool proportional, double partial) {
  const int rotated = proportional ? static_cast<int>(std::floor(partial * d / 2)) : d / 2;
  Vec inv(d / 2, 0.0);
  for (int k = 0; k < rotated; ++k) inv[k] = std::pow(theta, -2.0 * k / d);
  return inv;
}

std::vector<std::pair<int, double>> ReferenceRoute(const Vec& z, int k, const Vec& pes) {
  const double mx = *std::max_element(z.begin(), z.end());
  Vec p(z.size());
  double sum = 0;
  for (size_t i = 0; i < z.size(); ++i) sum += p[i] = std::exp(z[i] - mx);
  for (double& v : p) v /= sum;
  std::vector<int> order(z.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  double top = 0;
  for (int j = 0; j < k; ++j) top += p[order[j]];
  std::vector<std::pair<int, double>> out;
  for (int j = 0; j < k; ++j) out.push_back({order[j], p[order[j]] / top * pes[order[j]]});
  return out;
}

std::vector<std::vector<double>> ReferenceLogits(const std::string& dir,
                                                 const std::vector<int>& ids) {
  auto md = ModelDir::Open(dir);
  EXPECT_TRUE(md.ok()) << md.status().ToString();
  if (!md.ok()) return {};
  const ModelConfig& c = md->config();
  const CoreFile& core = md->core();
  auto T = [&](const std::string& name) -> Mat {
    const TensorDesc* t = core.Find(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? Decode(core.base(), *t) : Mat{};
  };
  const int n = static_cast<int>(ids.size()), H = c.hidden_size, nh = c.num_heads;
  const double eps = c.rms_norm_eps;
  const Mat E = T("embed_tokens");
  Mat h(n);
  for (int t = 0; t < n; ++t) {
    h[t] = E[ids[t]];
    for (double& v : h[t]) v *= c.embed_scale;
  }
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const AttentionGeometry& g = c.geometry(l);
    const bool full = c.is_full(l);
    const int hd = g.head_dim, nkv = g.num_kv_heads, rep = nh / nkv;
    const Vec inv =
        ReferenceInvFreq(hd, g.rope_theta, g.rope_type == "proportional", g.partial_rotary_factor);
    const Vec in_ln = Row(T(p + "input_layernorm")), qn = Row(T(p + "self_attn.q_norm")),
              kn = Row(T(p + "self_attn.k_norm"));
    const Mat Wq = T(p + "self_attn.q_proj"), Wk = T(p + "self_attn.k_proj"),
              Wo = T(p + "self_attn.o_proj");
    const Mat Wv = g.k_eq_v ? Mat{} : T(p + "self_attn.v_proj");
    Mat Q(n), K(n), V(n);
    for (int t = 0; t < n; ++t) {
      const Vec a = Rms(h[t], &in_ln, eps);
      Vec q = MatVec(Wq, a), kraw = MatVec(Wk, a), vraw = g.k_eq_v ? kraw : MatVec(Wv, a);
      Q[t].resize(nh * hd);
      K[t].resize(nkv * hd);
      V[t].resize(nkv * hd);
      for (int i = 0; i < nh; ++i) {
        Vec qi(q.begin() + i * hd, q.begin() + (i + 1) * hd);
        qi = Rms(qi, &qn, eps);
        Rope(qi.data(), hd, t, inv);
        std::copy(qi.begin(), qi.end(), Q[t].begin() + i * hd);
      }
      for (int j = 0; j < nkv; ++j) {
        Vec kj(kraw.begin() + j * hd, kraw.begin() + (j + 1) * hd);
        Vec vj(vraw.begin() + j * hd, vraw.begin() + (j + 1) * hd);
        kj = Rms(kj, &kn, eps);
        Rope(kj.data(), hd, t, inv);
        vj = Rms(vj, nullptr, eps);
        std::copy(kj.begin(), kj.end(), K[t].begin() + j * hd);
        std::copy(vj.begin(), vj.end(), V[t].begin() + j * hd);
      }
    }
    const Vec post_attn = Row(T(p + "post_attention_layernorm"));
    for (int t = 0; t < n; ++t) {
      Vec att(nh * hd, 0.0);
      for (int i = 0; i < nh; ++i) {
        const int j = i / rep;
        std::vector<double> s;
        std::vector<int> keys;
        for (int tau = 0; tau <= t; ++tau) {
          if (!full && t - tau >= c.sliding_window) continue;
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += Q[t][i * hd + d] * K[tau][j * hd + d];
          s.push_back(dot);  // scale 1.0
          keys.push_back(tau);
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& v : s) sum += v = std::exp(v - mx);
        for (size_t x = 0; x < s.size(); ++x)
          for (int d = 0; d < hd; ++d) att[i * hd + d] += s[x] / sum * V[keys[x]][j * hd + d];
      }
      Vec o = Rms(MatVec(Wo, att), &post_attn, eps);
      for (int d = 0; d < H; ++d) h[t][d] += o[d];
    }
    // Feed-forward: dense MLP and routed experts from the same residual.
    const Vec pre_ff = Row(T(p + "pre_feedforward_layernorm")),
              post_ff = Row(T(p + "post_feedforward_layernorm"));
    const Mat Wg = T(p + "mlp.gate_proj"), Wu = T(p + "mlp.up_proj"), Wd = T(p + "mlp.down_proj");
    Vec post1, pre2, post2, rscale, pes;
    Mat Wr;
    std::vector<std::array<Mat, 3>> experts;
    if (c.enable_moe) {
      post1 = Row(T(p + "post_feedforward_layernorm_1"));
      pre2 = Row(T(p + "pre_feedforward_layernorm_2"));
      post2 = Row(T(p + "post_feedforward_layernorm_2"));
      rscale = Row(T(p + "router.scale"));
      pes = Row(T(p + "router.per_expert_scale"));
      Wr = T(p + "router.proj");
      const ExpertLayerInfo& info = md->experts()->layers[l];
      auto file = MappedFile::Open(md->FilePath(info.file));
      EXPECT_TRUE(file.ok());
      for (int e = 0; e < c.num_experts; ++e) {
        const uint8_t* blob = file->data() + info.layout.stride * e;
        experts.push_back({Decode(blob, info.layout.gate), Decode(blob, info.layout.up),
                           Decode(blob, info.layout.down)});
      }
    }
    const double scalar = Row(T(p + "layer_scalar"))[0];
    for (int t = 0; t < n; ++t) {
      const Vec u = Rms(h[t], &pre_ff, eps);
      Vec gg = MatVec(Wg, u), uu = MatVec(Wu, u);
      for (size_t i = 0; i < gg.size(); ++i) gg[i] = Gelu(gg[i]) * uu[i];
      Vec ff = MatVec(Wd, gg);
      if (c.enable_moe) {
        ff = Rms(ff, &post1, eps);
        Vec r = Rms(h[t], nullptr, eps);
        for (int d = 0; d < H; ++d) r[d] *= rscale[d] / std::sqrt(static_cast<double>(H));
        const auto routes = ReferenceRoute(MatVec(Wr, r), c.top_k, pes);
        const Vec u2 = Rms(h[t], &pre2, eps);
        Vec moe(H, 0.0);
        for (auto [e, w] : routes) {
          Vec eg = MatVec(experts[e][0], u2), eu = MatVec(experts[e][1], u2);
          for (size_t i = 0; i < eg.size(); ++i) eg[i] = Gelu(eg[i]) * eu[i];
          const Vec y = MatVec(experts[e][2], eg);
          for (int d = 0; d < H; ++d) moe[d] += w * y[d];
        }
        const Vec m2 = Rms(moe, &post2, eps);
        for (int d = 0; d < H; ++d) ff[d] += m2[d];
      }
      ff = Rms(ff, &post_ff, eps);
      for (int d = 0; d < H; ++d) h[t][d] = (h[t][d] + ff[d]) * scalar;
    }
  }
  const Vec fn = Row(T("norm"));
  std::vector<std::vector<double>> logits(n);
  for (int t = 0; t < n; ++t) {
    logits[t] = MatVec(E, Rms(h[t], &fn, eps));
    if (c.final_logit_softcapping > 0)
      for (double& z : logits[t])
        z = c.final_logit_softcapping * std::tanh(z / c.final_logit_softcapping);
  }
  return logits;
}

}  // namespace rw::test
