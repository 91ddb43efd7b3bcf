"""Six bugs that Triton RMSNorms really have, planted one at a time in rmsnorm_triton.py.

Each is {"name", "description", "old", "new", "kill", "gate", "law"}: old is an exact substring found
once in rmsnorm_triton.py, new its replacement, and kill the input on which the mutant is wrong and the
original right (check.inputs' arguments; check_mutants.py builds it and shows both). "gate" says how
the gate on the CPU lane (under Triton's interpreter) kills it, and "law" is the -k expression of the
law whose test kills it: tests/test_triton_interpreter.py runs the gate limited to it on each mutant
and replays the killing case on the original.
"""

FORWARD = "test_forward_matches_reference and not large and not tall"
BACKWARD = "test_backward_matches_reference and not large and not tall"

MUTANTS = [
    {
        "name": "tail_mask_off_by_one",
        "description": "The statistics pass masks the tail with cols <= n: one element past the row "
                       "enters the sum of squares (the next row's first, or memory past the tensor).",
        "old": "mask=cols < n, other=0.0",
        "new": "mask=cols <= n, other=0.0",
        "kill": {"shape": (3, 3), "dtype": "float32", "weight_dtype": "same", "layout": "contiguous",
                 "grad_layout": "contiguous"},
        "gate": "yes: any N that is not a multiple of its block (every N < 4096 not a power of two)",
        "law": FORWARD,
    },
    {
        "name": "other_not_neutral",
        "description": "The statistics pass loads masked-off lanes as 1.0 instead of 0.0: every lane past "
                       "the row adds 1 to the sum of squares.",
        "old": "mask=cols < n, other=0.0",
        "new": "mask=cols < n, other=1.0",
        "kill": {"shape": (1, 3), "dtype": "float32", "weight_dtype": "same", "layout": "contiguous",
                 "grad_layout": "contiguous"},
        "gate": "yes: any N that is not a multiple of its block",
        "law": FORWARD,
    },
    {
        "name": "mean_over_block",
        "description": "The mean of squares divides by the block (a power of two) instead of N.",
        "old": "/ n + tl.load(EPS)",
        "new": "/ BLOCK + tl.load(EPS)",
        "kill": {"shape": (1, 3), "dtype": "float32", "weight_dtype": "same", "layout": "contiguous",
                 "grad_layout": "contiguous"},
        "gate": "yes: any N that is not a power of two below 4096 or a multiple of 4096 above it",
        "law": FORWARD,
    },
    {
        "name": "int32_row_offsets",
        "description": "The forward leaves the row index in int32, so row * row_stride is computed in int32 "
                       "and wraps once a row starts 2^31 elements or more past x's first.",
        "old": "row = tl.program_id(0).to(tl.int64)",
        "new": "row = tl.program_id(0)",
        "kill": {"shape": (3, 8), "dtype": "bfloat16", "weight_dtype": "same", "layout": "row_stride_2_30",
                 "grad_layout": "contiguous"},
        "gate": "yes: law row_offsets_past_2_31 places 3 rows at a row stride of 2^30 in an 8 GiB storage it never "
                "touches (this input; on a GPU, law beyond_2_31_elements draws whole tensors past 2^31 elements)",
        "law": "test_row_offsets_past_2_31",
    },
    {
        "name": "grad_weight_overwritten",
        "description": "The backward stores each row's share of grad_weight into its program's partial sums "
                       "instead of adding it: a program keeps only the last row it ran.",
        "old": "dw_sum + dy * x * inv_rms",
        "new": "dy * x * inv_rms",
        "kill": {"shape": (12, 3), "dtype": "float32", "weight_dtype": "same", "layout": "contiguous",
                 "grad_layout": "contiguous"},
        "gate": "yes: more rows than backward programs (8 under the interpreter)",
        "law": BACKWARD,
    },
    {
        "name": "grad_out_strides_of_x",
        "description": "The launcher passes x's strides for grad_out: right only while the two are laid out "
                       "alike (both contiguous), wrong for an expanded grad_out (y.sum()'s) or a transposed x.",
        "old": "dy2.stride(0), dy2.stride(1), x2.stride(0)",
        "new": "x2.stride(0), x2.stride(1), x2.stride(0)",
        # x transposed (strides 1, 3) and grad_out contiguous (7, 1): the mutant reads grad_out's own
        # elements in the wrong places, never past its storage (an expanded grad_out would be read past
        # its one element).
        "kill": {"shape": (3, 7), "dtype": "float32", "weight_dtype": "same", "layout": "transposed",
                 "grad_layout": "contiguous"},
        "gate": "yes: x and grad_out are drawn in layouts of their own (broadcast grad_out, transposed x)",
        "law": BACKWARD,
    },
]
