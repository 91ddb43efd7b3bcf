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
  // The users' forms: s = x + residual (float32; float64 for float64 x), y = s * rsqrt(mean(s^2) + eps) * (w + offset).
  m.def("fused_forward(Tensor x, Tensor? weight, float eps, Tensor? residual, float weight_offset) -> "
        "(Tensor y, Tensor? residual_out, Tensor inv_rms)");
  // Gradients of fused_forward's inputs from those of y and residual_out (None if unused) and its inv_rms.
  m.def("fused_backward(Tensor grad_y, Tensor? grad_residual_out, Tensor x, Tensor? weight, Tensor? residual, "
        "Tensor inv_rms, float weight_offset) -> (Tensor grad_x, Tensor? grad_residual, Tensor? grad_weight)");
  // vLLM's fused_add_rms_norm: residual <- x + residual (rounded), x <- fused_forward's y, in place.
  m.def("fused_add_(Tensor(a!) x, Tensor(b!) residual, Tensor? weight, float eps, float weight_offset) -> ()");
}

TORCH_LIBRARY_IMPL(rmsnorm, CPU, m) {
  m.impl("forward", &forward_cpu);
  m.impl("backward", &backward_cpu);
  m.impl("fused_forward", &fused_forward_cpu);
  m.impl("fused_backward", &fused_backward_cpu);
  m.impl("fused_add_", &fused_add_cpu_);
}

}  // namespace rmsnorm
