"""This project's own fused forms (rmsnorm.rms_norm) as module targets of the gate, each declaring in
RMSNORM_CONTRACT the variant it is and the rounding order rmsnorm's docstring states: the statistics in
float32 (float64 for float64 x), the unrounded sum normalised, y = s * inv_rms * (w + weight_offset) with w
promoted before the offset is added, rounded once to x's dtype (multiply_in_float32).

    python3 -m harness gate --device cpu --target module:examples.project_variants.fused_add

The same modules judge a mutant of the fused code (harness/mutants/catalogue.py names the module of each):
rms_norm calls whatever extension rmsnorm serves, and a mutant target adopts its build first."""
