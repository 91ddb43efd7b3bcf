"""The reference panel: RMSNorms people ship, wrapped to the seed card's contract so the gate can
judge them (`--target peer:NAME`). They are the false-alarm test: each is correct in the dtypes
it is meant for, and the gate must pass it there.

  hf             Hugging Face's LlamaRMSNorm, written out as it computes (upcast to float32,
                 normalise, round to the input dtype, multiply by the weight); backward by
                 autograd through those ops
  native         torch.nn.functional.rms_norm; on CUDA the fused ATen operators it runs
                 (torch.ops.aten._fused_rms_norm and _fused_rms_norm_backward)
  compiled       torch.compile of the hf function, forward and backward
  liger          Liger-Kernel's Triton RMSNorm (casting mode llama, in_place=False); on CUDA, or on the CPU
                 under Triton's interpreter (its worker sets TRITON_INTERPRET: harness.running.interpreter)

The variants people ship, each declaring its variant (harness.judging.variant) and called in its form:
  hf-qwen3       Hugging Face's Qwen3RMSNorm (LlamaRMSNorm's code, also per head); order cast_then_multiply
  hf-gemma       Hugging Face's GemmaRMSNorm: (1 + w) in float32, one rounding (multiply_in_float32)
  native-noweight  F.rms_norm without a weight (torch.nn.RMSNorm(elementwise_affine=False))
  compiled-gemma torch.compile of the hf-gemma function
  liger-gemma    Liger-Kernel's RMSNorm with Gemma's offset and casting mode; CUDA only
  liger-fused-add  Liger-Kernel's LigerFusedAddRMSNorm, (y, residual) with the stored sum; CUDA only
hf declares its order too (cast_then_multiply), so the law of the declared order holds it.

Modes that show real faults, with the diagnosis the gate must give:
  liger-inplace  Liger-Kernel's default in_place=True: backward writes grad_x into grad_out
  liger-float64  Liger-Kernel given float64 input, which it computes at float32 precision
  hf-float64     the same for the hf function, which upcasts only to float32

hf, compiled and liger upcast to float32 and no further, so they are meant for float32,
float16 and bfloat16: they refuse float64 with a clear error, and hf and compiled declare that
contract (RMSNORM_CONTRACT), so the gate draws only inside it; the -float64 modes do not refuse
float64.
"""

from __future__ import annotations

import os

import torch

from harness.judging.target import EpsMemo, grads_through

FLOAT32_ONLY_NOTE = ("computes in float32 at most (it upcasts to float32, not to float64): float64 input is "
                     "outside what it is meant for")


def hf_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm.forward, as a function."""
    input_dtype = x.dtype
    hidden = x.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + eps)
    return weight * hidden.to(input_dtype)


class Peer:
    """A peer as a target module: forward(x, weight, eps) and backward(grad_out, x, weight, inv)."""

    device_types = ("cpu", "cuda")

    def __init__(self, name: str, *, allow_float64: bool = True, contract: dict | None = None) -> None:
        self.__name__ = f"peer:{name}"
        self.name = name
        self.allow_float64 = allow_float64
        self.memo = EpsMemo()
        if contract is not None:
            self.RMSNORM_CONTRACT = contract  # harness.judging.contract: drawn only inside it, held to it

    def check_float64(self, x) -> None:
        if x.dtype == torch.float64 and not self.allow_float64:
            raise TypeError(f"peer:{self.name} {FLOAT32_ONLY_NOTE} (peer:{self.name}-float64 judges it there)")

    def unavailable(self, device: str) -> str | None:
        """None when the peer can run on device; otherwise why not."""
        if torch.device(device).type not in self.device_types:
            return f"peer:{self.name} runs on {' or '.join(self.device_types)} only, not {device}"
        return None


class Autograd(Peer):
    """A function of torch ops; backward by autograd through it (hf, compiled)."""

    def __init__(self, name: str, fn, **kw) -> None:
        super().__init__(name, **kw)
        self.fn = fn

    def forward(self, x, weight, eps):
        self.check_float64(x)
        self.memo.record(x, eps)
        return self.fn(x, weight, eps)

    def backward(self, grad_out, x, weight, inv_rms):
        self.check_float64(x)
        return grads_through(self.fn, grad_out, x, weight, self.memo.eps_for(x, inv_rms))


def _compiled_hf():
    return _compiled(hf_rms_norm)


def _compiled(fn):
    import torch._dynamo  # torch.compile's machinery: only for the compiled peers

    # Every new dtype, layout or shape class compiles afresh; past the default limit dynamo
    # would quietly run the eager function instead, and the peer would no longer be compiled.
    for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 100_000)
    return torch.compile(fn, dynamic=True)


class Native(Autograd):
    """F.rms_norm; on CUDA, where input and weight share a dtype, the fused ATen operators it
    runs there, with their saved rstd handed from forward to backward as the card's inv_rms."""

    def __init__(self) -> None:
        super().__init__("native", lambda x, w, eps: torch.nn.functional.rms_norm(x, [x.shape[-1]], w, eps))

    @staticmethod
    def _fused(x, weight) -> bool:
        return x.is_cuda and x.dtype == weight.dtype

    def forward(self, x, weight, eps):
        if self._fused(x, weight):
            return torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], weight, eps)  # (y, rstd [..., 1])
        return super().forward(x, weight, eps)

    def backward(self, grad_out, x, weight, inv_rms):
        if self._fused(x, weight):
            rstd = inv_rms.reshape(*x.shape[:-1], 1)
            gx, gw = torch.ops.aten._fused_rms_norm_backward(grad_out, x, [x.shape[-1]], rstd, weight, [True, True])
            return gx, gw
        return super().backward(grad_out, x, weight, inv_rms)


def liger_unavailable(peer: Peer, device: str) -> str | None:
    """Why a Liger-Kernel peer (Liger, LigerVariant) cannot run on device, or None: CUDA, or the CPU under
    Triton's interpreter, with Liger-Kernel installed."""
    interpreted = torch.device(device).type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"
    why = None if interpreted else Peer.unavailable(peer, device)
    if why:
        return why + " (or on the cpu under Triton's interpreter, which the gate runs it under there)"
    try:
        import liger_kernel.ops.rms_norm  # noqa: F401
    except ImportError as e:
        return f"peer:{peer.name} needs Liger-Kernel (pip install liger-kernel): {e}"
    return None


class Liger(Peer):
    """liger_kernel.ops.rms_norm's forward and backward, as LigerRMSNormFunction calls them: every
    tensor made contiguous first, the weight too (its ensure_contiguous; the kernels index the weight
    as if it were), casting mode llama, offset 0."""

    device_types = ("cuda",)

    def __init__(self, name: str, *, in_place: bool, **kw) -> None:
        super().__init__(name, **kw)
        self.in_place = in_place

    def unavailable(self, device):
        return liger_unavailable(self, device)

    def forward(self, x, weight, eps):
        from liger_kernel.ops.rms_norm import rms_norm_forward  # an optional dependency (CUDA only)

        self.check_float64(x)
        y, _, rstd, _, _, _ = rms_norm_forward(x.contiguous(), weight.contiguous(), eps, 0.0, "llama", None)
        return y, rstd

    def backward(self, grad_out, x, weight, inv_rms):
        from liger_kernel.ops.rms_norm import (  # an optional dependency (CUDA only)
            _str_to_casting_mode, calculate_settings, rms_norm_backward)

        self.check_float64(x)
        n = x.shape[-1]
        block, warps = calculate_settings(n)
        rstd = inv_rms.reshape(-1).contiguous()
        gx, gw = rms_norm_backward(grad_out.contiguous(), x.contiguous().view(-1, n), weight.contiguous(), rstd, 0.0,
                                   _str_to_casting_mode["llama"], block, warps, self.in_place, None)
        return gx, gw


def hf_gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' GemmaRMSNorm.forward, as a function: normalised in float32, times (1 + w) in float32,
    rounded once to x's dtype."""
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (out * (1.0 + weight.float())).type_as(x)


class VariantPeer(Peer):
    """A peer in a variant's call form (harness.judging.variant): forward(x, weight, eps[, residual]), its
    backward autograd's, through the function."""

    def __init__(self, name: str, fn, **kw) -> None:
        super().__init__(name, **kw)
        self.fn = fn

    def forward(self, x, weight, eps, *residual):
        self.check_float64(x)
        return self.fn(x, weight, eps, *residual)


class LigerVariant(VariantPeer):
    """Liger-Kernel as its users call its variants: LigerRMSNormFunction with Gemma's offset and casting
    mode, LigerFusedAddRMSNormFunction; CUDA only."""

    device_types = ("cuda",)

    def unavailable(self, device):
        return liger_unavailable(self, device)


def _liger_gemma(x, weight, eps):
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction  # an optional dependency (CUDA only)

    return LigerRMSNormFunction.apply(x.contiguous(), weight.contiguous(), eps, 1.0, "gemma", False)


def _liger_fused_add(x, weight, eps, residual):
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction  # an optional dependency

    return LigerFusedAddRMSNormFunction.apply(x.contiguous(), residual.contiguous(), weight.contiguous(), eps, 0.0,
                                              "llama", False)


# What the peers are meant for, declared (harness.judging.contract): hf, compiled and Liger-Kernel upcast to
# float32 and no further; Liger-Kernel's kernels take rows of at most 65536 (calculate_settings
# refuses more, seen on the H200).
UPCAST_TO_FLOAT32 = {"dtypes": ["float32", "float16", "bfloat16"]}
# HF's Llama and Qwen3 round x_hat to x's dtype, then multiply by the weight; Gemma multiplies by (1 + w) in
# float32 and rounds once (harness.judging.order).
HF_LLAMA = {**UPCAST_TO_FLOAT32, "order": "cast_then_multiply"}
HF_GEMMA = {**UPCAST_TO_FLOAT32, "weight_offset": 1, "order": "multiply_in_float32"}
LIGER = {"dtypes": ["float32", "float16", "bfloat16"], "max_n": 65536}


def _registry():
    return {
        "hf": lambda: Autograd("hf", hf_rms_norm, allow_float64=False, contract=HF_LLAMA),
        # Qwen3RMSNorm is LlamaRMSNorm's code, also used per head (q_norm, k_norm over head_dim).
        "hf-qwen3": lambda: Autograd("hf-qwen3", hf_rms_norm, allow_float64=False, contract=HF_LLAMA),
        "hf-gemma": lambda: VariantPeer("hf-gemma", hf_gemma_rms_norm, allow_float64=False, contract=HF_GEMMA),
        "native-noweight": lambda: VariantPeer("native-noweight", lambda x, w, eps: torch.nn.functional.rms_norm(
            x, [x.shape[-1]], None, eps), contract={"weight": False}),
        "compiled-gemma": lambda: VariantPeer("compiled-gemma", _compiled(hf_gemma_rms_norm), allow_float64=False,
                                              contract=HF_GEMMA),
        "hf-float64": lambda: Autograd("hf-float64", hf_rms_norm),
        "native": Native,
        "compiled": lambda: Autograd("compiled", _compiled_hf(), allow_float64=False, contract=UPCAST_TO_FLOAT32),
        "liger": lambda: Liger("liger", in_place=False, allow_float64=False, contract=LIGER),
        "liger-inplace": lambda: Liger("liger-inplace", in_place=True, allow_float64=False, contract=LIGER),
        "liger-float64": lambda: Liger("liger-float64", in_place=False, contract={**LIGER, "dtypes": ["float64"]}),
        "liger-gemma": lambda: LigerVariant("liger-gemma", _liger_gemma, allow_float64=False,
                                            contract={**LIGER, "weight_offset": 1, "order": "multiply_in_float32"}),
        "liger-fused-add": lambda: LigerVariant("liger-fused-add", _liger_fused_add, allow_float64=False,
                                                contract={**LIGER, "residual": "returned", "sum": "stored",
                                                          "order": "cast_then_multiply"}),
    }


NAMES = tuple(_registry())
PANEL = ("hf", "native", "compiled", "liger", "hf-qwen3", "hf-gemma", "native-noweight", "compiled-gemma",
         "liger-gemma", "liger-fused-add")  # the false-alarm panel: each must pass the gate where it runs


def load(name: str, device: str) -> Peer:
    """The peer called name, ready to run on device; ValueError when it cannot run here."""
    reg = _registry()
    if name not in reg:
        raise ValueError(f"no peer {name!r}; expected peer:NAME with NAME one of {', '.join(reg)}")
    peer = reg[name]()
    why = peer.unavailable(device)
    if why:
        raise ValueError(why)
    return peer
