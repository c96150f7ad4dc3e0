// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/linear_attention.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "multihead/core/context.h"
#include "multihead/core/error.h"
#include "multihead/core/step_profile.h"
#include "multihead/kernels/gemm.h"
#include "simd_rows.h"

namespace multihead {
namespace {

template <typename T>
inline T phi(T x) {
  return x > T(0) ? x + T(1) : std::exp(x);  // elu(x) + 1
}

// f (n, D) = phi of n rows of x (row stride ldx); a row whose key is padded
// (pad[r] != 0) is zero, so the key adds nothing to any sum.
template <typename T>
void phi_rows(T* f, const T* x, std::int64_t ldx, std::int64_t n, std::int64_t D, const std::uint8_t* pad) {
  for (std::int64_t r = 0; r < n; ++r) {
    T* fr = f + r * D;
    if (pad && pad[r]) {
      std::fill(fr, fr + D, T(0));
    } else if constexpr (std::is_same_v<T, float>) {
      HWY_NAMESPACE::simd::elu_plus_one(fr, x + r * ldx, D);  // the baseline target: a small part of the work
    } else {
      for (std::int64_t e = 0; e < D; ++e) fr[e] = phi(x[r * ldx + e]);
    }
  }
}

// phi'(x) from x and phi(x): 1 above 0, exp(x) = phi(x) otherwise.
template <typename T>
inline T phi_grad(T x, T fx) {
  return x > T(0) ? T(1) : fx;
}

// S += phi(k) v^T, z += phi(k): one key joins the sums (the recurrent form).
template <typename T>
void add_key(std::vector<T>& S, std::vector<T>& z, const T* k, const T* v, std::int64_t D, std::int64_t Dv) {
  for (std::int64_t e = 0; e < D; ++e) {
    const T f = phi(k[e]);
    z[static_cast<std::size_t>(e)] += f;
    T* srow = S.data() + e * Dv;
    for (std::int64_t c = 0; c < Dv; ++c) srow[c] += f * v[c];
  }
}

// The blocks of `chunk` queries and the keys each block sees. Query i sees
// keys j <= i + S - L (causal, bottom-right aligned) or all of them.
struct Blocks {
  const AttentionDims& d;
  bool causal;
  std::int64_t C;
  std::int64_t count() const { return (d.L + C - 1) / C; }
  std::int64_t first(std::int64_t blk) const { return blk * C; }
  std::int64_t rows(std::int64_t blk) const { return std::min(C, d.L - blk * C); }
  // Keys [0, prefix_end] are seen by every query of the block: they are in
  // the state. Keys (prefix_end, intra_end] are seen by some of them only.
  std::int64_t last_key(std::int64_t i) const {
    return causal ? std::clamp<std::int64_t>(i + d.S - d.L, -1, d.S - 1) : d.S - 1;
  }
  std::int64_t prefix_end(std::int64_t blk) const { return last_key(first(blk)); }
  std::int64_t intra_end(std::int64_t blk) const { return last_key(first(blk) + rows(blk) - 1); }
};

// One (batch, head): views of its rows and the per-head work buffers.
template <typename T>
struct Head {
  const T *q, *k, *v;
  std::int64_t ldq, ldk, ldv;
  const std::uint8_t* pad;  // (S) or null
  std::int64_t D, Dv, C;
  std::vector<T> S, z;  // (D, Dv), (D): the sums over keys [0, added)
  std::int64_t added = 0;
  std::vector<T> fq, fk;    // (C, D): phi of a block's queries, of a run of keys
  std::vector<T> num, den;  // (C, Dv), (C)
  std::vector<T> A;         // (C, C): a block's weights on the keys it partly sees

  Head(const T* q_, std::int64_t ldq_, const T* k_, std::int64_t ldk_, const T* v_, std::int64_t ldv_,
       const std::uint8_t* pad_, std::int64_t D_, std::int64_t Dv_, std::int64_t C_)
      : q(q_),
        k(k_),
        v(v_),
        ldq(ldq_),
        ldk(ldk_),
        ldv(ldv_),
        pad(pad_),
        D(D_),
        Dv(Dv_),
        C(C_),
        S(static_cast<std::size_t>(D * Dv), T(0)),
        z(static_cast<std::size_t>(D), T(0)),
        fq(static_cast<std::size_t>(C * D)),
        fk(static_cast<std::size_t>(C * D)),
        num(static_cast<std::size_t>(C * Dv)),
        den(static_cast<std::size_t>(C)),
        A(static_cast<std::size_t>(C * C)) {}

  const std::uint8_t* pad_at(std::int64_t j) const { return pad ? pad + j : nullptr; }
  void phi_keys(std::int64_t j0, std::int64_t m) { phi_rows(fk.data(), k + j0 * ldk, ldk, m, D, pad_at(j0)); }

  // Adds keys [added, last] to S and z, C keys per product.
  void advance(std::int64_t last) {
    for (; added <= last;) {
      const std::int64_t m = std::min(C, last - added + 1);
      phi_keys(added, m);
      gemm(Trans::kYes, Trans::kNo, D, Dv, m, T(1), fk.data(), D, v + added * ldv, ldv, T(1), S.data(), Dv);
      for (std::int64_t r = 0; r < m; ++r)
        for (std::int64_t e = 0; e < D; ++e) z[static_cast<std::size_t>(e)] += fk[static_cast<std::size_t>(r * D + e)];
      added += m;
    }
  }

  // num and den of block rows [i0, i0 + n), whose state holds keys [0, pe],
  // and the masked weights A (n, m) on keys pe+1 .. pe+m (fk holds their phi).
  void block(const Blocks& bl, std::int64_t i0, std::int64_t n, std::int64_t pe, std::int64_t m, T eps) {
    phi_rows(fq.data(), q + i0 * ldq, ldq, n, D, nullptr);
    gemm(Trans::kNo, Trans::kNo, n, Dv, D, T(1), fq.data(), D, S.data(), Dv, T(0), num.data(), Dv);
    for (std::int64_t r = 0; r < n; ++r) {
      T s = eps;
      for (std::int64_t e = 0; e < D; ++e)
        s += fq[static_cast<std::size_t>(r * D + e)] * z[static_cast<std::size_t>(e)];
      den[static_cast<std::size_t>(r)] = s;
    }
    if (m == 0) return;
    phi_keys(pe + 1, m);
    gemm(Trans::kNo, Trans::kYes, n, m, D, T(1), fq.data(), D, fk.data(), D, T(0), A.data(), C);
    for (std::int64_t r = 0; r < n; ++r) {
      T* a = A.data() + r * C;
      const std::int64_t sees = bl.last_key(i0 + r) - pe;  // row r sees columns [0, sees)
      for (std::int64_t c = std::max<std::int64_t>(sees, 0); c < m; ++c) a[c] = T(0);
      T s = T(0);
      for (std::int64_t c = 0; c < m; ++c) s += a[c];
      den[static_cast<std::size_t>(r)] += s;
    }
    gemm(Trans::kNo, Trans::kNo, n, Dv, m, T(1), A.data(), C, v + (pe + 1) * ldv, ldv, T(1), num.data(), Dv);
  }
};

template <typename T>
Head<T> make_head(const HeadsView<const T>& q, const HeadsView<const T>& k, const HeadsView<const T>& v,
                  const AttentionDims& d, const LinearAttentionArgs<T>& a, std::int64_t b, std::int64_t h) {
  return Head<T>(q.at(b, h), q.row_stride, k.at(b, h), k.row_stride, v.at(b, h), v.row_stride,
                 a.key_padding ? a.key_padding + b * d.S : nullptr, d.D, d.Dv, a.chunk);
}

template <typename T>
void check_args(const LinearAttentionArgs<T>& a) {
  check<ConfigError>(a.eps > T(0), "linear attention eps must be positive");
  check<ConfigError>(a.chunk > 0, "linear attention chunk must be positive, got {}", a.chunk);
}

}  // namespace

template <typename T>
void linear_attention_forward(HeadsView<T> out, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                              const AttentionDims& d, const LinearAttentionArgs<T>& a) {
  const StepProfileScope profile(StepPart::kAttention);
  check_args(a);
  const Blocks bl{d, a.causal, a.chunk};
  const RuntimeContext& ctx = context();  // the workers' GEMMs run under the caller's
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const ContextBinding bound(ctx);
    const std::int64_t b = bh / d.H, h = bh % d.H;
    Head<T> hd = make_head(q, k, v, d, a, b, h);
    for (std::int64_t blk = 0; blk < bl.count(); ++blk) {
      const std::int64_t i0 = bl.first(blk), n = bl.rows(blk), pe = bl.prefix_end(blk);
      hd.advance(pe);
      hd.block(bl, i0, n, pe, bl.intra_end(blk) - pe, a.eps);
      for (std::int64_t r = 0; r < n; ++r) {
        T* o = out.at(b, h) + (i0 + r) * out.row_stride;
        const T inv = T(1) / hd.den[static_cast<std::size_t>(r)];
        for (std::int64_t c = 0; c < d.Dv; ++c) o[c] = hd.num[static_cast<std::size_t>(r * d.Dv + c)] * inv;
      }
    }
  }
}

// With num_i = phi(q_i)^T S_i, den_i = phi(q_i) . z_i + eps, out_i = num_i / den_i
// and g_i the gradient of out_i:
//   dnum_i = g_i / den_i,  dden_i = -(g_i . out_i) / den_i
//   d phi(q_i) = S_i dnum_i + z_i dden_i
//   d phi(k_j) = R_j v_j + r_j,  dv_j = R_j^T phi(k_j)
// where R_j = sum over the queries that see key j of phi(q_i) dnum_i^T, and
// r_j the same sum of phi(q_i) dden_i. Block by block: a forward sweep gives
// dq and the terms of the keys a block sees only in part (through its masked
// weights A and their gradient dA); a backward sweep accumulates R and r
// over the blocks and hands them to the keys that join the state at each.
template <typename T>
void linear_attention_backward(HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, HeadsView<const T> dout,
                               HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, const AttentionDims& d,
                               const LinearAttentionArgs<T>& a) {
  const StepProfileScope profile(StepPart::kAttention);
  check_args(a);
  const Blocks bl{d, a.causal, a.chunk};
  const std::int64_t C = a.chunk;
  const RuntimeContext& ctx = context();
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const ContextBinding bound(ctx);
    const std::int64_t b = bh / d.H, h = bh % d.H;
    Head<T> hd = make_head(q, k, v, d, a, b, h);
    T* gk = dk.at(b, h);  // holds d phi(k) until the end
    T* gv = dv.at(b, h);
    for (std::int64_t j = 0; j < d.S; ++j) {
      std::fill_n(gk + j * dk.row_stride, d.D, T(0));
      std::fill_n(gv + j * dv.row_stride, d.Dv, T(0));
    }
    std::vector<T> dnum(static_cast<std::size_t>(d.L * d.Dv)), dden(static_cast<std::size_t>(d.L));  // every query
    std::vector<T> dfq(static_cast<std::size_t>(C * d.D)), dA(static_cast<std::size_t>(C * C));
    // Forward sweep.
    for (std::int64_t blk = 0; blk < bl.count(); ++blk) {
      const std::int64_t i0 = bl.first(blk), n = bl.rows(blk), pe = bl.prefix_end(blk), m = bl.intra_end(blk) - pe;
      hd.advance(pe);
      hd.block(bl, i0, n, pe, m, a.eps);
      T* dn = dnum.data() + i0 * d.Dv;
      for (std::int64_t r = 0; r < n; ++r) {
        const T* g = dout.at(b, h) + (i0 + r) * dout.row_stride;
        const T den = hd.den[static_cast<std::size_t>(r)];
        T g_out = T(0);  // g_i . out_i
        for (std::int64_t c = 0; c < d.Dv; ++c) {
          g_out += g[c] * hd.num[static_cast<std::size_t>(r * d.Dv + c)] / den;
          dn[r * d.Dv + c] = g[c] / den;
        }
        dden[static_cast<std::size_t>(i0 + r)] = -g_out / den;
      }
      // d phi(q) = dnum S^T + dden z^T (+ dA phi(k) over the keys seen in part)
      gemm(Trans::kNo, Trans::kYes, n, d.D, d.Dv, T(1), dn, d.Dv, hd.S.data(), d.Dv, T(0), dfq.data(), d.D);
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t e = 0; e < d.D; ++e)
          dfq[static_cast<std::size_t>(r * d.D + e)] +=
              dden[static_cast<std::size_t>(i0 + r)] * hd.z[static_cast<std::size_t>(e)];
      if (m > 0) {
        const T* vj = v.at(b, h) + (pe + 1) * v.row_stride;
        // dA = dnum V^T + dden 1^T where the query sees the key, else 0.
        gemm(Trans::kNo, Trans::kYes, n, m, d.Dv, T(1), dn, d.Dv, vj, v.row_stride, T(0), dA.data(), C);
        for (std::int64_t r = 0; r < n; ++r) {
          T* da = dA.data() + r * C;
          const std::int64_t sees = bl.last_key(i0 + r) - pe;
          for (std::int64_t c = 0; c < m; ++c) da[c] = c < sees ? da[c] + dden[static_cast<std::size_t>(i0 + r)] : T(0);
        }
        gemm(Trans::kNo, Trans::kNo, n, d.D, m, T(1), dA.data(), C, hd.fk.data(), d.D, T(1), dfq.data(), d.D);
        gemm(Trans::kYes, Trans::kNo, m, d.D, n, T(1), dA.data(), C, hd.fq.data(), d.D, T(1),
             gk + (pe + 1) * dk.row_stride, dk.row_stride);
        gemm(Trans::kYes, Trans::kNo, m, d.Dv, n, T(1), hd.A.data(), C, dn, d.Dv, T(1), gv + (pe + 1) * dv.row_stride,
             dv.row_stride);
      }
      for (std::int64_t r = 0; r < n; ++r) {
        const T* qi = q.at(b, h) + (i0 + r) * q.row_stride;
        T* o = dq.at(b, h) + (i0 + r) * dq.row_stride;
        for (std::int64_t e = 0; e < d.D; ++e)
          o[e] = dfq[static_cast<std::size_t>(r * d.D + e)] *
                 phi_grad(qi[e], hd.fq[static_cast<std::size_t>(r * d.D + e)]);
      }
    }
    // Backward sweep: R and r over blocks blk.. last reach the keys that
    // every query of block blk sees and no query of block blk - 1 does.
    std::vector<T> R(static_cast<std::size_t>(d.D * d.Dv), T(0)), rv(static_cast<std::size_t>(d.D), T(0));
    for (std::int64_t blk = bl.count() - 1; blk >= 0; --blk) {
      const std::int64_t i0 = bl.first(blk), n = bl.rows(blk);
      phi_rows(hd.fq.data(), q.at(b, h) + i0 * q.row_stride, q.row_stride, n, d.D, nullptr);
      gemm(Trans::kYes, Trans::kNo, d.D, d.Dv, n, T(1), hd.fq.data(), d.D, dnum.data() + i0 * d.Dv, d.Dv, T(1),
           R.data(), d.Dv);
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t e = 0; e < d.D; ++e)
          rv[static_cast<std::size_t>(e)] +=
              hd.fq[static_cast<std::size_t>(r * d.D + e)] * dden[static_cast<std::size_t>(i0 + r)];
      const std::int64_t lo = blk == 0 ? 0 : bl.prefix_end(blk - 1) + 1, hi = bl.prefix_end(blk);
      for (std::int64_t j0 = lo; j0 <= hi; j0 += C) {
        const std::int64_t m = std::min(C, hi - j0 + 1);
        // d phi(k) += V R^T + 1 r^T;  dv += phi(k) R
        T* gkj = gk + j0 * dk.row_stride;
        gemm(Trans::kNo, Trans::kYes, m, d.D, d.Dv, T(1), v.at(b, h) + j0 * v.row_stride, v.row_stride, R.data(), d.Dv,
             T(1), gkj, dk.row_stride);
        for (std::int64_t r = 0; r < m; ++r)
          for (std::int64_t e = 0; e < d.D; ++e) gkj[r * dk.row_stride + e] += rv[static_cast<std::size_t>(e)];
        hd.phi_keys(j0, m);
        gemm(Trans::kNo, Trans::kNo, m, d.Dv, d.D, T(1), hd.fk.data(), d.D, R.data(), d.Dv, T(1),
             gv + j0 * dv.row_stride, dv.row_stride);
      }
    }
    // d phi(k) to dk; padded keys have no gradient.
    for (std::int64_t j0 = 0; j0 < d.S; j0 += C) {
      const std::int64_t m = std::min(C, d.S - j0);
      phi_rows(hd.fk.data(), k.at(b, h) + j0 * k.row_stride, k.row_stride, m, d.D, nullptr);
      for (std::int64_t r = 0; r < m; ++r) {
        T* g = gk + (j0 + r) * dk.row_stride;
        if (hd.pad && hd.pad[j0 + r]) {
          std::fill_n(g, d.D, T(0));
          std::fill_n(gv + (j0 + r) * dv.row_stride, d.Dv, T(0));
          continue;
        }
        const T* kj = k.at(b, h) + (j0 + r) * k.row_stride;
        for (std::int64_t e = 0; e < d.D; ++e) g[e] *= phi_grad(kj[e], hd.fk[static_cast<std::size_t>(r * d.D + e)]);
      }
    }
  }
}

template <typename T>
void linear_attention_step(LinearAttentionState<T>& st, T* out, const T* q, const T* k, const T* v, std::int64_t D,
                           std::int64_t Dv, T eps) {
  st.s.resize(static_cast<std::size_t>(D * Dv), T(0));
  st.z.resize(static_cast<std::size_t>(D), T(0));
  T den = eps;
  add_key(st.s, st.z, k, v, D, Dv);
  for (std::int64_t c = 0; c < Dv; ++c) out[c] = T(0);
  for (std::int64_t e = 0; e < D; ++e) den += phi(q[e]) * st.z[static_cast<std::size_t>(e)];
  for (std::int64_t e = 0; e < D; ++e) {
    const T f = phi(q[e]) / den;
    for (std::int64_t c = 0; c < Dv; ++c) out[c] += f * st.s[static_cast<std::size_t>(e * Dv + c)];
  }
}

// A type argument cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define MULTIHEAD_INSTANTIATE(T)                                                                                      \
  template void linear_attention_forward<T>(HeadsView<T>, HeadsView<const T>, HeadsView<const T>, HeadsView<const T>, \
                                            const AttentionDims&, const LinearAttentionArgs<T>&);                     \
  template void linear_attention_backward<T>(HeadsView<T>, HeadsView<T>, HeadsView<T>, HeadsView<const T>,            \
                                             HeadsView<const T>, HeadsView<const T>, HeadsView<const T>,              \
                                             const AttentionDims&, const LinearAttentionArgs<T>&);                    \
  template void linear_attention_step<T>(LinearAttentionState<T>&, T*, const T*, const T*, const T*, std::int64_t,    \
                                         std::int64_t, T);
// NOLINTEND(bugprone-macro-parentheses)
MULTIHEAD_INSTANTIATE(float)
MULTIHEAD_INSTANTIATE(double)
#undef MULTIHEAD_INSTANTIATE

}  // namespace multihead
