#include "multihead/kernels/linear_attention.h"

#include <cmath>
#include <vector>

#include "multihead/core/error.h"

namespace multihead {
namespace {

template <typename T>
inline T phi(T x) {
  return x > T(0) ? x + T(1) : std::exp(x);  // elu(x) + 1
}
template <typename T>
inline T phi_grad(T x) {
  return x > T(0) ? T(1) : std::exp(x);
}

// Query i's last visible key (causal, bottom-right aligned), or S - 1.
inline std::int64_t last_key(const AttentionDims& d, bool causal, std::int64_t i) {
  return causal ? std::min(d.S - 1, i + d.S - d.L) : d.S - 1;
}

template <typename T>
bool padded(const LinearAttentionArgs<T>& a, const AttentionDims& d, std::int64_t b, std::int64_t j) {
  return a.key_padding && a.key_padding[b * d.S + j];
}

// S += phi(k) v^T, z += phi(k): one key joins the sums.
template <typename T>
void add_key(std::vector<T>& S, std::vector<T>& z, const T* k, const T* v, std::int64_t D, std::int64_t Dv) {
  for (std::int64_t e = 0; e < D; ++e) {
    const T f = phi(k[e]);
    z[static_cast<std::size_t>(e)] += f;
    T* srow = S.data() + e * Dv;
    for (std::int64_t c = 0; c < Dv; ++c) srow[c] += f * v[c];
  }
}

}  // namespace

template <typename T>
void linear_attention_forward(HeadsView<T> out, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                              const AttentionDims& d, const LinearAttentionArgs<T>& a) {
  check<ConfigError>(a.eps > T(0), "linear attention eps must be positive");
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const std::int64_t b = bh / d.H, h = bh % d.H;
    std::vector<T> S(static_cast<std::size_t>(d.D * d.Dv), T(0)), z(static_cast<std::size_t>(d.D), T(0));
    std::vector<T> fq(static_cast<std::size_t>(d.D)), fk(static_cast<std::size_t>(d.D));
    std::int64_t next = 0;  // keys added so far
    for (std::int64_t i = 0; i < d.L; ++i) {
      for (; next <= last_key(d, a.causal, i); ++next)
        if (!padded(a, d, b, next)) add_key(S, z, k.at(b, h) + next * k.row_stride, v.at(b, h) + next * v.row_stride, d.D, d.Dv);
      const T* qi = q.at(b, h) + i * q.row_stride;
      T den = a.eps;
      for (std::int64_t e = 0; e < d.D; ++e) den += (fq[static_cast<std::size_t>(e)] = phi(qi[e])) * z[static_cast<std::size_t>(e)];
      T* o = out.at(b, h) + i * out.row_stride;
      for (std::int64_t c = 0; c < d.Dv; ++c) o[c] = T(0);
      for (std::int64_t e = 0; e < d.D; ++e) {
        const T f = fq[static_cast<std::size_t>(e)] / den;
        const T* srow = S.data() + e * d.Dv;
        for (std::int64_t c = 0; c < d.Dv; ++c) o[c] += f * srow[c];
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
// r_j the same sum of phi(q_i) dden_i: suffix sums in the causal form.
template <typename T>
void linear_attention_backward(HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, HeadsView<const T> dout,
                               HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                               const AttentionDims& d, const LinearAttentionArgs<T>& a) {
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const std::int64_t b = bh / d.H, h = bh % d.H;
    const std::size_t DDv = static_cast<std::size_t>(d.D * d.Dv);
    std::vector<T> S(DDv, T(0)), z(static_cast<std::size_t>(d.D), T(0));
    std::vector<T> dnum(static_cast<std::size_t>(d.L * d.Dv)), dden(static_cast<std::size_t>(d.L));
    std::vector<T> fq(static_cast<std::size_t>(d.D)), num(static_cast<std::size_t>(d.Dv));
    // Forward sweep: the sums as each query saw them give dq.
    std::int64_t next = 0;
    for (std::int64_t i = 0; i < d.L; ++i) {
      for (; next <= last_key(d, a.causal, i); ++next)
        if (!padded(a, d, b, next)) add_key(S, z, k.at(b, h) + next * k.row_stride, v.at(b, h) + next * v.row_stride, d.D, d.Dv);
      const T* qi = q.at(b, h) + i * q.row_stride;
      const T* gi = dout.at(b, h) + i * dout.row_stride;
      T den = a.eps;
      for (std::int64_t e = 0; e < d.D; ++e) den += (fq[static_cast<std::size_t>(e)] = phi(qi[e])) * z[static_cast<std::size_t>(e)];
      std::fill(num.begin(), num.end(), T(0));
      for (std::int64_t e = 0; e < d.D; ++e)
        for (std::int64_t c = 0; c < d.Dv; ++c) num[static_cast<std::size_t>(c)] += fq[static_cast<std::size_t>(e)] * S[static_cast<std::size_t>(e * d.Dv + c)];
      T g_out = T(0);  // g_i . out_i
      for (std::int64_t c = 0; c < d.Dv; ++c) g_out += gi[c] * num[static_cast<std::size_t>(c)] / den;
      T* dn = dnum.data() + i * d.Dv;
      for (std::int64_t c = 0; c < d.Dv; ++c) dn[c] = gi[c] / den;
      dden[static_cast<std::size_t>(i)] = -g_out / den;
      T* gq = dq.at(b, h) + i * dq.row_stride;
      for (std::int64_t e = 0; e < d.D; ++e) {
        T s = z[static_cast<std::size_t>(e)] * dden[static_cast<std::size_t>(i)];
        for (std::int64_t c = 0; c < d.Dv; ++c) s += S[static_cast<std::size_t>(e * d.Dv + c)] * dn[c];
        gq[e] = s * phi_grad(qi[e]);
      }
    }
    // Backward sweep: keys from last to first, adding each query once every
    // key it sees has been passed (for non-causal, all queries at once).
    std::vector<T> R(DDv, T(0)), r(static_cast<std::size_t>(d.D), T(0));
    std::int64_t qi_next = d.L - 1;
    for (std::int64_t j = d.S - 1; j >= 0; --j) {
      for (; qi_next >= 0 && last_key(d, a.causal, qi_next) >= j; --qi_next) {
        const T* qq = q.at(b, h) + qi_next * q.row_stride;
        const T* dn = dnum.data() + qi_next * d.Dv;
        for (std::int64_t e = 0; e < d.D; ++e) {
          const T f = phi(qq[e]);
          r[static_cast<std::size_t>(e)] += f * dden[static_cast<std::size_t>(qi_next)];
          for (std::int64_t c = 0; c < d.Dv; ++c) R[static_cast<std::size_t>(e * d.Dv + c)] += f * dn[c];
        }
      }
      T* gk = dk.at(b, h) + j * dk.row_stride;
      T* gv = dv.at(b, h) + j * dv.row_stride;
      if (padded(a, d, b, j)) {
        for (std::int64_t e = 0; e < d.D; ++e) gk[e] = T(0);
        for (std::int64_t c = 0; c < d.Dv; ++c) gv[c] = T(0);
        continue;
      }
      const T* kj = k.at(b, h) + j * k.row_stride;
      const T* vj = v.at(b, h) + j * v.row_stride;
      for (std::int64_t c = 0; c < d.Dv; ++c) gv[c] = T(0);
      for (std::int64_t e = 0; e < d.D; ++e) {
        const T f = phi(kj[e]);
        T s = r[static_cast<std::size_t>(e)];
        const T* Rrow = R.data() + e * d.Dv;
        for (std::int64_t c = 0; c < d.Dv; ++c) {
          s += Rrow[c] * vj[c];
          gv[c] += Rrow[c] * f;
        }
        gk[e] = s * phi_grad(kj[e]);
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

#define MULTIHEAD_INSTANTIATE(T)                                                                                     \
  template void linear_attention_forward<T>(HeadsView<T>, HeadsView<const T>, HeadsView<const T>, HeadsView<const T>, \
                                            const AttentionDims&, const LinearAttentionArgs<T>&);                    \
  template void linear_attention_backward<T>(HeadsView<T>, HeadsView<T>, HeadsView<T>, HeadsView<const T>,           \
                                             HeadsView<const T>, HeadsView<const T>, HeadsView<const T>,             \
                                             const AttentionDims&, const LinearAttentionArgs<T>&);    \
  template void linear_attention_step<T>(LinearAttentionState<T>&, T*, const T*, const T*, const T*, std::int64_t,   \
                                         std::int64_t, T);
MULTIHEAD_INSTANTIATE(float)
MULTIHEAD_INSTANTIATE(double)
#undef MULTIHEAD_INSTANTIATE

}  // namespace multihead
