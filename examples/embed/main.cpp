// SPDX-License-Identifier: Apache-2.0
// A program that uses an installed multihead's core layer alone (multihead::core): one
// self-attention layer (E=64, H=4), forward and backward on random input (B=2, L=12), and the
// norms of what came out. With the same seed, `multihead demo --seed S` prints the same three norms.
#include <cmath>
#include <cstdlib>
#include <cstdio>

#include "multihead/multihead.h"

template <class Values>
double norm(const Values& values) {
  double sq = 0;
  for (float v : values) sq += double(v) * v;
  return std::sqrt(sq);
}

int main(int argc, char** argv) {
  using namespace multihead;
  MultiheadAttentionConfig cfg;
  cfg.embed_dim = 64;
  cfg.num_heads = 4;
  ParamStore store;
  MultiheadAttention mha(store, "", cfg);
  store.finalize();
  Rng rng(argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 0);
  mha.init(rng);

  Tensor x({2, 12, cfg.embed_dim});  // (B, L, E)
  for (float& v : x.span_f32()) v = rng.normal();
  MultiheadAttentionOutput out = mha.forward_self(x, nullptr, nullptr, MultiheadAttentionCall{});
  Tensor grad_out({2, 12, cfg.embed_dim});
  grad_out.fill(1.0f);
  MultiheadAttentionGrads grads = mha.backward(grad_out);

  std::printf("multihead %s: |output| = %.6f |grad input| = %.6f |grad params| = %.6f\n", MULTIHEAD_VERSION,
              norm(out.output.span_f32()), norm(grads.query.span_f32()), norm(store.all_grads()));
}
