#include "multihead/core/threading.h"

#include <cblas.h>
#include <omp.h>

namespace multihead {

void set_num_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace multihead
