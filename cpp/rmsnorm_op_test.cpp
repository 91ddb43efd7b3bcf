// Calls the rmsnorm operators through the libtorch C++ API (the dispatcher, as any C++ user
// would), the plain forward and the fused add, and checks them against libtorch expressions
// computed in float64.
// The tensor API and the seed (not torch/torch.h, the whole C++ frontend: 26 s to compile against 15 s).
#include <torch/types.h>
#include <torch/utils.h>

#include <cstdio>
#include <optional>
#include <tuple>

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& w, double eps) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("rmsnorm::forward", "")
                             .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, double)>();
  return op.call(x, w, eps);
}

using FusedOutputs = std::tuple<at::Tensor, std::optional<at::Tensor>, at::Tensor>;

FusedOutputs fused_forward(const at::Tensor& x, const std::optional<at::Tensor>& w, double eps,
                           const std::optional<at::Tensor>& residual, double weight_offset) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("rmsnorm::fused_forward", "")
                             .typed<FusedOutputs(const at::Tensor&, const std::optional<at::Tensor>&, double,
                                                 const std::optional<at::Tensor>&, double)>();
  return op.call(x, w, eps, residual, weight_offset);
}

void check_dtype(torch::Dtype dtype, double tol, const char* name) {
  torch::manual_seed(0);
  const double eps = 1e-5;
  auto x = torch::randn({7, 33, 769}).to(dtype);
  auto w = torch::randn({769}).to(dtype);
  auto x64 = x.to(torch::kDouble);
  auto inv = torch::rsqrt(x64.pow(2).mean(-1, /*keepdim=*/true) + eps);
  auto ref = x64 * inv * w.to(torch::kDouble);
  auto [y, inv_rms] = forward(x, w, eps);
  const double err = (y.to(torch::kDouble) - ref).abs().max().item<double>();
  const double inv_err = (inv_rms.to(torch::kDouble) - inv.squeeze(-1)).abs().max().item<double>();
  std::printf("     %s: max |y - ref| = %.3g, max |inv_rms - ref| = %.3g\n", name, err, inv_err);
  expect(y.sizes() == x.sizes() && y.dtype() == x.dtype(), "y has the shape and dtype of x");
  expect(err < tol * 8 && inv_err < 1e-4, name);

  // Autograd through the operator, against autograd through the libtorch expression.
  auto xa = x64.clone().requires_grad_(true);
  auto wa = w.to(torch::kDouble).clone().requires_grad_(true);
  std::get<0>(forward(xa, wa, eps)).sum().backward();
  auto xb = x64.clone().requires_grad_(true);
  auto wb = w.to(torch::kDouble).clone().requires_grad_(true);
  (xb * torch::rsqrt(xb.pow(2).mean(-1, true) + eps) * wb).sum().backward();
  expect(torch::allclose(xa.grad(), xb.grad(), 1e-9, 1e-12) && torch::allclose(wa.grad(), wb.grad(), 1e-9, 1e-9),
         "autograd (float64) matches libtorch");
}

// The fused residual add with Gemma's offset, bfloat16 x beside a float32 residual stream: the
// residual comes back as the float32 sum, and y is the norm of that sum times (1 + w).
void check_fused_add() {
  torch::manual_seed(0);
  const double eps = 1e-5;
  auto x = torch::randn({5, 769}).to(torch::kBFloat16);
  auto r = torch::randn({5, 769});
  auto w = torch::randn({769}) * 0.1;
  auto s = x.to(torch::kFloat) + r;
  auto s64 = s.to(torch::kDouble);
  auto ref = s64 * torch::rsqrt(s64.pow(2).mean(-1, /*keepdim=*/true) + eps) * (w.to(torch::kDouble) + 1.0);
  auto [y, residual_out, inv_rms] = fused_forward(x, w, eps, r, 1.0);
  const double err = (y.to(torch::kDouble) - ref).abs().max().item<double>();
  std::printf("     fused add, bfloat16 x: max |y - ref| = %.3g\n", err);
  expect(y.dtype() == torch::kBFloat16 && residual_out.has_value() && residual_out->dtype() == torch::kFloat,
         "fused add: y has x's dtype, residual_out the residual's");
  expect(residual_out.has_value() && torch::equal(*residual_out, s), "fused add: residual_out is the float32 sum");
  expect(err < 4e-2 * 8, "fused add forward matches libtorch");

  // Gradients of x, the residual and the weight in float64, against libtorch's autograd.
  auto xa = x.to(torch::kDouble).requires_grad_(true);
  auto ra = r.to(torch::kDouble).requires_grad_(true);
  auto wa = w.to(torch::kDouble).requires_grad_(true);
  auto [ya, ra_out, inv_a] = fused_forward(xa, wa, eps, ra, 1.0);
  (ya.sum() + ra_out->pow(2).sum()).backward();
  auto xb = x.to(torch::kDouble).requires_grad_(true);
  auto rb = r.to(torch::kDouble).requires_grad_(true);
  auto wb = w.to(torch::kDouble).requires_grad_(true);
  auto sb = xb + rb;
  ((sb * torch::rsqrt(sb.pow(2).mean(-1, true) + eps) * (wb + 1.0)).sum() + sb.pow(2).sum()).backward();
  expect(torch::allclose(xa.grad(), xb.grad(), 1e-9, 1e-12) && torch::allclose(ra.grad(), rb.grad(), 1e-9, 1e-12) &&
             torch::allclose(wa.grad(), wb.grad(), 1e-9, 1e-9),
         "fused add autograd (float64) matches libtorch");
}

}  // namespace

int main() {
  check_dtype(torch::kFloat, 1e-5, "float32 forward matches libtorch");
  check_dtype(torch::kBFloat16, 4e-2, "bfloat16 forward matches libtorch");
  check_fused_add();
  bool raised = false;
  try {
    forward(torch::randn({2, 8}), torch::randn({9}), 1e-6);
  } catch (const c10::Error& e) {
    raised = std::string(e.what()).find("rmsnorm: expected weight of shape [8]") != std::string::npos;
  }
  expect(raised, "a wrong weight shape raises a clear error");
  std::printf("%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
