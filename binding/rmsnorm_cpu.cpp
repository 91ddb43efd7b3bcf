// The CPU kernels (kernels/rmsnorm_cpu.h) instantiated for every (x, weight) type pair that
// dispatch_types in rmsnorm.h calls (x of float, double, half or bfloat16, weight of x's dtype or
// float32), and for every (x, residual, weight) form that dispatch_fused_types calls. Only c10's
// two 16-bit types are included here, no ATen: an edit of the kernels recompiles this file and not
// the ones that parse torch's headers (about 20 s). With the fused forms' instantiations it takes
// 4.5 s at -O3 on a 2-core machine, 0.9 s without them.
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

// The fused forms, for each residual form (R = T, R = float, or none: R = T unused) and weight
// form (W = T, W = float, or none: W = T unused) of x's type T that dispatch_fused_types calls;
// with float x, "float" is T and is listed once.
#define RMSNORM_CPU_FUSED(T, R, W, kAdd, kWeight)                                                  \
  template void rmsnorm_fused_fwd_rows<T, R, W, kAdd, kWeight>(                                    \
      const T*, int64_t, const R*, int64_t, const W*, AccT<T>, T*, int64_t, R*, int64_t, AccT<T>*, \
      int64_t, int64_t, int64_t, AccT<T>);                                                         \
  template void rmsnorm_fused_bwd_dx_rows<T, R, W, kAdd, kWeight, false>(                          \
      const T*, int64_t, const R*, int64_t, const T*, int64_t, const R*, int64_t, const W*,        \
      AccT<T>, const AccT<T>*, T*, R*, int64_t, int64_t, int64_t);                                 \
  template void rmsnorm_fused_bwd_dx_rows<T, R, W, kAdd, kWeight, true>(                           \
      const T*, int64_t, const R*, int64_t, const T*, int64_t, const R*, int64_t, const W*,        \
      AccT<T>, const AccT<T>*, T*, R*, int64_t, int64_t, int64_t);

#define RMSNORM_CPU_FUSED_W(T, R, kAdd) \
  RMSNORM_CPU_FUSED(T, R, T, kAdd, true) RMSNORM_CPU_FUSED(T, R, T, kAdd, false)
#define RMSNORM_CPU_FUSED_WF(T, R, kAdd) RMSNORM_CPU_FUSED_W(T, R, kAdd) RMSNORM_CPU_FUSED(T, R, float, kAdd, true)
#define RMSNORM_CPU_ADD_DW(T, R)                                                                    \
  template void rmsnorm_add_bwd_dw_partial<T, R>(const T*, int64_t, const T*, int64_t, const R*,   \
                                                 int64_t, const AccT<T>*, AccT<T>*, int64_t,       \
                                                 int64_t, int64_t, int64_t);

#define RMSNORM_CPU_FUSED_TYPE(T)                                                   \
  RMSNORM_CPU_FUSED_WF(T, T, true) RMSNORM_CPU_FUSED_WF(T, float, true)             \
  RMSNORM_CPU_FUSED_WF(T, T, false) RMSNORM_CPU_ADD_DW(T, T) RMSNORM_CPU_ADD_DW(T, float)

RMSNORM_CPU_FUSED_W(float, float, true)
RMSNORM_CPU_FUSED_W(float, float, false)
RMSNORM_CPU_ADD_DW(float, float)
RMSNORM_CPU_FUSED_TYPE(double)
RMSNORM_CPU_FUSED_TYPE(c10::Half)
RMSNORM_CPU_FUSED_TYPE(c10::BFloat16)

#undef RMSNORM_CPU_FUSED_TYPE
#undef RMSNORM_CPU_ADD_DW
#undef RMSNORM_CPU_FUSED_WF
#undef RMSNORM_CPU_FUSED_W
#undef RMSNORM_CPU_FUSED

}  // namespace cpu
}  // namespace rmsnorm
