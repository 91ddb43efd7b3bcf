"""What the bench times: this project through its module (the users' path) and its operators, a --target
through the seed card's autograd.Function, and each peer as its users call it (Hugging Face's LlamaRMSNorm,
torch.nn.RMSNorm, torch.compile of LlamaRMSNorm, Liger-Kernel, quack); those not installed are named as not
run."""

from __future__ import annotations

from typing import Callable

import torch

import rmsnorm
from rmsnorm import RMSNorm
from harness.judging.laws.common import make_function
from harness.running.loading import load
from harness.running.peers import hf_rms_norm
from harness.running.spec import TargetSpec
from harness.tools.bench import EPS, OPERATORS, PEERS, USERS, Calls, Impl


def _module_impl(name: str, make: Callable, note: str) -> Impl:
    """A torch.nn.Module a model would hold: make(n, dtype) -> (module to call, its weight)."""

    def setup(x, w, dy):
        module, weight = make(x.shape[-1], x.dtype)
        with torch.no_grad():
            weight.copy_(w)
        xg = x.detach().requires_grad_()
        y = module(xg)
        y = y[0] if isinstance(y, (tuple, list)) else y

        def forward():
            with torch.no_grad():
                return module(x)

        return Calls(forward, lambda: torch.autograd.grad(y, (xg, weight), dy, retain_graph=True))

    return Impl(name, USERS, setup, note)


def _hf_module(n: int, dtype):
    """Hugging Face's LlamaRMSNorm (transformers' own class when installed, else the same
    computation as a module)."""
    try:  # an optional dependency
        from transformers.models.llama.modeling_llama import LlamaRMSNorm

        m = LlamaRMSNorm(n, eps=EPS)
    except ImportError:
        class LlamaRMSNorm(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.ones(n))

            def forward(self, x):
                return hf_rms_norm(x, self.weight, EPS)

        m = LlamaRMSNorm()
    m = m.to(device="cuda", dtype=dtype)
    return m, m.weight


def _project_module(n: int, dtype):
    m = RMSNorm(n, eps=EPS, device="cuda", dtype=dtype)
    return m, m.weight


def _torch_module(n: int, dtype):
    m = torch.nn.RMSNorm(n, eps=EPS, device="cuda", dtype=dtype)
    return m, m.weight


def _compiled_module(n: int, dtype):
    for knob in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 100_000)
    m, w = _hf_module(n, dtype)
    return torch.compile(m, dynamic=False), w


def _liger_module() -> Callable | str:
    try:  # an optional dependency
        from liger_kernel.transformers.rms_norm import LigerRMSNorm
    except ImportError as e:
        return f"Liger-Kernel is not installed ({e})"

    def make(n, dtype):
        m = LigerRMSNorm(n, eps=EPS).to(device="cuda", dtype=dtype)
        return m, m.weight

    return make


def _quack_module() -> Callable | str:
    try:  # an optional dependency
        from quack.rmsnorm import rmsnorm as quack_rmsnorm
    except ImportError as e:
        return f"quack is not installed ({e})"

    class QuackRMSNorm(torch.nn.Module):
        def __init__(self, n, dtype):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(n, device="cuda", dtype=dtype))

        def forward(self, x):
            return quack_rmsnorm(x, self.weight, eps=EPS)

    def make(n, dtype):
        m = QuackRMSNorm(n, dtype)
        return m, m.weight

    return make


def _project_operators() -> Impl:
    def setup(x, w, dy):
        _, inv = torch.ops.rmsnorm.forward(x, w, EPS)
        return Calls(lambda: torch.ops.rmsnorm.forward(x, w, EPS)[0],
                     lambda: torch.ops.rmsnorm.backward(dy, x, w, inv))

    return Impl("project", OPERATORS, setup, "torch.ops.rmsnorm.forward and .backward")


def _native_operators() -> Impl:
    def setup(x, w, dy):
        n = [x.shape[-1]]
        _, rstd = torch.ops.aten._fused_rms_norm(x, n, w, EPS)
        return Calls(lambda: torch.ops.aten._fused_rms_norm(x, n, w, EPS)[0],
                     lambda: torch.ops.aten._fused_rms_norm_backward(dy, x, n, rstd, w, [True, True]))

    return Impl("torch", OPERATORS, setup, "F.rms_norm's fused ATen operators")


def _liger_operators() -> Impl | str:
    try:  # an optional dependency
        from liger_kernel.ops.rms_norm import (_str_to_casting_mode, calculate_settings, rms_norm_backward,
                                               rms_norm_forward)
    except ImportError as e:
        return f"Liger-Kernel is not installed ({e})"

    def setup(x, w, dy):
        out = rms_norm_forward(x, w, EPS, 0.0, "llama", None)
        block, warps = calculate_settings(x.shape[-1])
        mode = _str_to_casting_mode["llama"]
        return Calls(lambda: rms_norm_forward(x, w, EPS, 0.0, "llama", None)[0],
                     lambda: rms_norm_backward(dy, x, w, out[2], 0.0, mode, block, warps, False, None))

    return Impl("liger", OPERATORS, setup, "Liger-Kernel's rms_norm_forward and rms_norm_backward, in_place=False")


def _target_impl(spec: TargetSpec) -> Impl:
    """A --target (source folder or module:NAME) through the seed card's autograd.Function."""
    t = load(spec, "cuda", strict=False)
    fn = make_function(t.module)

    def setup(x, w, dy):
        xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
        y = fn.apply(xg, wg, EPS)

        def forward():
            with torch.no_grad():
                return fn.apply(x, w, EPS)

        return Calls(forward, lambda: torch.autograd.grad(y, (xg, wg), dy, retain_graph=True))

    return Impl(str(spec), USERS, setup, f"{t.note}, through the seed card's autograd.Function")


def implementations(targets: list[str], peers: list[str]) -> tuple[list[Impl], list[str]]:
    """The implementations to time (the users' path first, then the raw operators), and a line for
    each one that cannot run here."""
    users, operators, skipped = [], [], []
    for spec in map(TargetSpec.parse, targets):
        if spec.is_project:
            rmsnorm.extension()
            users.append(_module_impl("project", _project_module, "rmsnorm.RMSNorm"))
            operators.append(_project_operators())
        else:
            users.append(_target_impl(spec))
    for p in peers:
        if p == "hf":
            users.append(_module_impl("hf", _hf_module, "Hugging Face LlamaRMSNorm, autograd"))
        elif p == "torch":
            users.append(_module_impl("torch", _torch_module, "torch.nn.RMSNorm (F.rms_norm)"))
            operators.append(_native_operators())
        elif p == "compiled":
            users.append(_module_impl("compiled", _compiled_module, "torch.compile of LlamaRMSNorm, per shape"))
        elif p == "liger":
            make = _liger_module()
            if isinstance(make, str):
                skipped.append(f"liger: {make}")
            else:
                users.append(_module_impl("liger", make, "Liger-Kernel's LigerRMSNorm"))
                operators.append(_liger_operators())
        elif p == "quack":
            make = _quack_module()
            if isinstance(make, str):
                skipped.append(f"quack: {make}")
            else:
                users.append(_module_impl("quack", make, "quack's rmsnorm (CuTe DSL)"))
        else:
            raise ValueError(f"--peers: expected names from {', '.join(PEERS)}, but got {p!r}")
    return users + operators, skipped
