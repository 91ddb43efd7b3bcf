"""A Triton RMSNorm (rmsnorm_triton), its mutants and the scripts that measure and check them."""
