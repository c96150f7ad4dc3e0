// SPDX-License-Identifier: Apache-2.0
#include "multihead/core/threading.h"

#include <cblas.h>
#include <omp.h>

#include "multihead/core/error.h"

namespace multihead {

void check_threads(std::int64_t n) {
  check<ConfigError>(n >= 0 && n <= kMaxThreads, "threads must be in [0, {}] (0: all cores), got {}", kMaxThreads, n);
}

void set_num_threads(int n) {
  check_threads(n);
  if (n == 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

OnThisThreadOnly::OnThisThreadOnly() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }

OnThisThreadOnly::~OnThisThreadOnly() { omp_set_num_threads(saved_); }

}  // namespace multihead
