"""Two patches of Triton 3.8's interpreter (TRITON_INTERPRET=1), each a context manager, that let kernels
written for the compiled path run on CPU tensors:

  float_scalars_have_to()  Python float kernel arguments get the .to(dtype) they have compiled;
  libdevice_as_tl_math()   calls of triton.language.extra.libdevice functions reach tl.math's
                           function of the same name instead of the stub that returns None.

Liger-Kernel 0.8.5's RMSNorm needs both (eps.to(tl.float32), then libdevice's rsqrt). They were written
here first; the gate now applies both in the worker of every target it runs under the interpreter, and
they live in harness/running/interpreter.py, where each is documented (what it answers, what it patches,
its limits). The scripts of this folder import them from here.
"""

from harness.running.interpreter import float_scalars_have_to, libdevice_as_tl_math  # noqa: F401
