// Fast path: a row spread over the CTAs of a thread-block cluster, its sum exchanged through
// distributed shared memory. The kernels are in rmsnorm_rows.cuh.
#include "rmsnorm_rows.cuh"

#define RMSNORM_INSTANTIATE(T, W) RMSNORM_INSTANTIATE_FAST_PATH(T, W, true)
RMSNORM_FOR_EACH_FAST_PAIR(RMSNORM_INSTANTIATE)
#undef RMSNORM_INSTANTIATE
