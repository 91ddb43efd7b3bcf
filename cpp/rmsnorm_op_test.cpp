// Calls the rmsnorm operators through the libtorch C++ API (the dispatcher, as any C++ user
// would) and checks them against a libtorch expression computed in float64.
// The tensor API and the seed (not torch/torch.h, the whole C++ frontend: 26 s to compile against 15 s).
#include <torch/types.h>
#include <torch/utils.h>

#include <cstdio>
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

}  // namespace

int main() {
  check_dtype(torch::kFloat, 1e-5, "float32 forward matches libtorch");
  check_dtype(torch::kBFloat16, 4e-2, "bfloat16 forward matches libtorch");
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
