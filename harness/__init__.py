"""RMSNorm extension (CPU and CUDA) and the property-based gate that judges RMSNorm extensions.

The project's own operator: ``harness.ops.rms_norm`` and ``harness.ops.RMSNorm``.
The command line: ``python -m harness --help``.
"""
