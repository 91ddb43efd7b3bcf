// The CPU kernels (kernels/rmsnorm_cpu.h) instantiated for every (x, weight) type pair that
// dispatch_types in rmsnorm.h calls: x of float, double, half or bfloat16, weight of x's dtype
// or float32. Only c10's two 16-bit types are included here, no ATen: an edit of the kernels
// recompiles this file (under a second) and not the ones that parse torch's headers (about 20 s).
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "../kernels/rmsnorm_cpu_api.h"
#include "../kernels/rmsnorm_cpu.h"

namespace rmsnorm {
namespace cpu {

#define RMSNORM_CPU_PAIR(T, W)                                                                    \
  template void rmsnorm_fwd_rows<T, W>(const T*, int64_t, const W*, T*, AccT<T>*, int64_t,       \
                                       int64_t, int64_t, AccT<T>);                               \
  template void rmsnorm_bwd_dx_rows<T, W>(const T*, int64_t, const T*, int64_t, const W*,        \
                                          const AccT<T>*, T*, int64_t, int64_t, int64_t);        \
  template void rmsnorm_bwd_dw_reduce<T, W>(const AccT<T>*, W*, int64_t, int64_t, int64_t, int64_t);

#define RMSNORM_CPU_TYPE(T)                                                                       \
  RMSNORM_CPU_PAIR(T, T)                                                                          \
  template void rmsnorm_bwd_dw_partial<T>(const T*, int64_t, const T*, int64_t, const AccT<T>*,  \
                                          AccT<T>*, int64_t, int64_t, int64_t, int64_t);

RMSNORM_CPU_TYPE(float)
RMSNORM_CPU_TYPE(double)
RMSNORM_CPU_TYPE(c10::Half)
RMSNORM_CPU_TYPE(c10::BFloat16)
RMSNORM_CPU_PAIR(double, float)
RMSNORM_CPU_PAIR(c10::Half, float)
RMSNORM_CPU_PAIR(c10::BFloat16, float)

#undef RMSNORM_CPU_TYPE
#undef RMSNORM_CPU_PAIR

}  // namespace cpu
}  // namespace rmsnorm
