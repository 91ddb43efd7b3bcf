"""Tools beside the gate: the mutation score (mutate), compute-sanitizer (sanitize), Nsight Compute
(nsight), speed beside the peers (bench), the property sheet (sheet) and the GPU lanes' records (lane)."""
