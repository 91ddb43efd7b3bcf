// Fast path: a row held in registers by a group of threads of one CTA (several rows a CTA when
// the row is short). The kernels are in rmsnorm_rows.cuh.
#include "rmsnorm_rows.cuh"

#define RMSNORM_INSTANTIATE(T, W) RMSNORM_INSTANTIATE_FAST_PATH(T, W, false)
RMSNORM_FOR_EACH_FAST_PAIR(RMSNORM_INSTANTIATE)
#undef RMSNORM_INSTANTIATE
