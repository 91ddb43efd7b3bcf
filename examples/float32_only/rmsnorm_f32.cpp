// A float32-only RMSNorm for the CPU, as a kernel author following the seed card might write one
// first: correct for float32 input of any layout, and it refuses every other dtype with a clear
// error. Judged with its contract declared, it passes:
//   python3 -m harness gate --target examples/float32_only --dtypes float32
// and without the declaration the gate fails it for coverage (three dtypes never checked).
// ATen and torch's pybind11 casters for tensors, not torch/extension.h (the whole C++ frontend):
// this file compiles in half the time (17 CPU-s against 34 on a 2-core machine), which the gate
// pays on first use.
#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <tuple>

namespace {

void check_float32(const at::Tensor& t, const char* name) {
  TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat, "rmsnorm_f32: expected ", name,
                   " of dtype float32, but got ", t.scalar_type());
}

void check_args(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_float32(x, "x");
  check_float32(weight, "weight");
  TORCH_CHECK_VALUE(x.dim() >= 1 && x.size(-1) >= 1, "rmsnorm_f32: expected x of shape [..., N] with N >= 1, but got ",
                    x.sizes());
  TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == x.size(-1),
                    "rmsnorm_f32: expected weight of shape [", x.size(-1), "], but got ", weight.sizes());
  TORCH_CHECK_VALUE(x.device().is_cpu() && weight.device().is_cpu(), "rmsnorm_f32: expected CPU tensors, but got ",
                    x.device(), " and ", weight.device());
  TORCH_CHECK_VALUE(eps >= 0 && std::isfinite(eps), "rmsnorm_f32: expected a finite eps >= 0, but got ", eps);
}

// y = x * inv_rms * weight, inv_rms = 1 / sqrt(mean(x^2) + eps) per row; returns (y, inv_rms).
std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x_in, const at::Tensor& weight_in, double eps) {
  check_args(x_in, weight_in, eps);
  const at::Tensor x = x_in.contiguous();
  const at::Tensor w = weight_in.contiguous();
  const int64_t n = x.size(-1);
  const int64_t rows = x.numel() / n;
  at::Tensor y = at::empty_like(x);
  auto lead = x.sizes().vec();
  lead.pop_back();
  at::Tensor inv = at::empty(lead, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  float* ip = inv.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    float ss = 0.f;
    for (int64_t j = 0; j < n; ++j) ss += xp[r * n + j] * xp[r * n + j];
    const float v = 1.f / std::sqrt(ss / static_cast<float>(n) + static_cast<float>(eps));
    ip[r] = v;
    for (int64_t j = 0; j < n; ++j) yp[r * n + j] = xp[r * n + j] * v * wp[j];
  }
  return {y, inv};
}

// grad_x = inv * (g - x * inv^2 * mean(g * x)), g = grad_out * weight; grad_weight = sum over rows of
// grad_out * x * inv.
std::tuple<at::Tensor, at::Tensor> backward(const at::Tensor& grad_out_in, const at::Tensor& x_in,
                                            const at::Tensor& weight_in, const at::Tensor& inv_in) {
  check_args(x_in, weight_in, 0.0);
  check_float32(grad_out_in, "grad_out");
  check_float32(inv_in, "inv_rms");
  TORCH_CHECK_VALUE(grad_out_in.sizes() == x_in.sizes(), "rmsnorm_f32: expected grad_out of shape ", x_in.sizes(),
                    ", but got ", grad_out_in.sizes());
  const int64_t n = x_in.size(-1);
  const int64_t rows = x_in.numel() / n;
  TORCH_CHECK_VALUE(inv_in.numel() == rows, "rmsnorm_f32: expected inv_rms with ", rows, " elements, but got ",
                    inv_in.numel());
  const at::Tensor x = x_in.contiguous(), w = weight_in.contiguous();
  const at::Tensor dy = grad_out_in.contiguous(), inv = inv_in.contiguous();
  at::Tensor dx = at::empty_like(x);
  at::Tensor dw = at::zeros_like(w);
  const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>(), *gp = dy.data_ptr<float>();
  const float* ip = inv.data_ptr<float>();
  float *dxp = dx.data_ptr<float>(), *dwp = dw.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float v = ip[r];
    float dot = 0.f;
    for (int64_t j = 0; j < n; ++j) dot += gp[r * n + j] * wp[j] * xp[r * n + j];
    const float c = v * v * dot / static_cast<float>(n);
    for (int64_t j = 0; j < n; ++j) {
      dxp[r * n + j] = v * (gp[r * n + j] * wp[j] - xp[r * n + j] * c);
      dwp[j] += gp[r * n + j] * xp[r * n + j] * v;
    }
  }
  return {dx, dw};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "RMSNorm forward, float32 only: (y, inv_rms)");
  m.def("backward", &backward, "RMSNorm backward, float32 only: (grad_x, grad_weight)");
}
