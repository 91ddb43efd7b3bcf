"""The property-based gate that judges RMSNorm extensions (and this project's own, the ``rmsnorm``
package: ``from rmsnorm import RMSNorm, rms_norm``).

The command line: ``rmsnorm-gate --help`` (or ``python3 -m harness --help`` in a clone).
"""

import logging

# torch.utils.cpp_extension warns "No CUDA runtime is found" on import wherever there is no GPU,
# into the middle of a run's progress: the gate says which kernels it built, in one line.
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
