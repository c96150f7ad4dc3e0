// One owner for the cores. Our kernels parallelise with OpenMP, and BLAS calls
// made inside those regions run single-threaded (OpenBLAS's OpenMP build and
// oneDNN both check omp_in_parallel); BLAS calls outside them use the same
// count (oneDNN reads it from OpenMP at each call).
#pragma once

namespace multihead {

// Sets the thread count for OpenMP regions and for BLAS; n <= 0 means all cores.
void set_num_threads(int n);
int num_threads();

}  // namespace multihead
