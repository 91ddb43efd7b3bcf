// The operator schemas of the RMSNorm extension and their CPU implementations (binding/rmsnorm.cpp);
// binding/rmsnorm_cuda.cpp and binding/rmsnorm_autograd.cpp register the CUDA and Autograd ones.
#include <torch/library.h>

#include "rmsnorm.h"

namespace rmsnorm {

// All schemas of the extension.
TORCH_LIBRARY(rmsnorm, m) {
  // y, inv_rms = forward(x, weight, eps): y = x * rsqrt(mean(x^2, -1) + eps) * weight.
  m.def("forward(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)");
  // grad_x, grad_weight = backward(grad_out, x, weight, inv_rms), inv_rms from forward.
  m.def("backward(Tensor grad_out, Tensor x, Tensor weight, Tensor inv_rms) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(rmsnorm, CPU, m) {
  m.impl("forward", &forward_cpu);
  m.impl("backward", &backward_cpu);
}

}  // namespace rmsnorm
