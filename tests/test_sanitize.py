"""compute-sanitizer's output is summarised by its count of errors (the tool itself runs only on
the GPU lane: `python3 -m harness sanitize`)."""

import pytest

from harness.tools.sanitize import summary_line, tool_verdict


def test_the_summary_is_the_count_not_the_note_after_it():
    # The tail of a memcheck run over the cuda_fwd_tail_past_row mutant on the H200.
    lines = ["=========     Host Frame: ...", "========= ERROR SUMMARY: 22 errors",
             "========= ERROR SUMMARY: 2 errors were not printed. Use --print-limit option to adjust the number of "
             "printed errors"]
    assert summary_line(lines) == "========= ERROR SUMMARY: 22 errors"
    race = ["rmsnorm sanitize inner: 24 cases", "========= RACECHECK SUMMARY: 20 hazards displayed (22 errors, 38 warnings)"]
    assert summary_line(race) == race[1]
    assert summary_line(["no summary at all"]) == "no summary at all" and summary_line([]) == ""


def test_a_tool_whose_run_died_did_not_finish_and_is_not_shown_as_errors():
    # synccheck's tail in a kernel lane on an 80 GB H100, beside mutate: no error found, and the
    # run died of an out-of-memory error in the harness's tensors. It read "synccheck  ERRORS".
    died = ["    ratio = torch.where(use, e / bound.clamp_min(1e-300), 0.0)",
            "torch.AcceleratorError: CUDA error: out of memory",
            "Search for `cudaErrorMemoryAllocation' in https://docs.nvidia.com/cuda/cuda-runtime-api/...",
            "========= Target application returned an error", "========= ERROR SUMMARY: 0 errors"]
    assert tool_verdict(1, died) == "DID NOT FINISH (exit 1: torch.AcceleratorError: CUDA error: out of memory)"
    assert tool_verdict(139, ["========= ERROR SUMMARY: 0 errors"]) == "DID NOT FINISH (exit 139)"
    # What the tool found (its --error-exitcode), and a clean run.
    assert tool_verdict(99, ["========= ERROR SUMMARY: 22 errors"]) == "ERRORS"
    assert tool_verdict(0, ["========= ERROR SUMMARY: 0 errors"]) == "clean"


def test_a_case_that_ran_out_of_memory_beside_others_runs_again_until_the_wait_is_spent():
    from harness.tools.sanitize import run_waiting

    slept = []
    calls = []

    def twice_out_of_memory():
        calls.append(1)
        if len(calls) <= 2:
            raise RuntimeError("CUDA error: out of memory")

    assert run_waiting(twice_out_of_memory, "case", wait_s=60, step_s=5, sleep=slept.append) == 2
    assert len(calls) == 3 and slept == [5, 5]

    def always():
        raise RuntimeError("CUDA error: out of memory")

    slept.clear()
    with pytest.raises(RuntimeError, match="out of memory"):
        run_waiting(always, "case", wait_s=12, step_s=5, sleep=slept.append)
    assert slept == [5, 5]
    # Any other error is the case's own: raised at once.
    with pytest.raises(ValueError):
        run_waiting(lambda: (_ for _ in ()).throw(ValueError("bad")), "case", sleep=slept.append)
    assert slept == [5, 5]


def test_allocations_refused_beside_other_processes_are_not_the_programs_errors():
    from harness.tools.sanitize import refused_allocations

    refused = ['========= Program hit cudaErrorMemoryAllocation (error 2) due to "out of memory" on CUDA API call to '
               'cudaMalloc.', "=========     Host Frame: at::native::empty_cuda(...)"] * 2
    ran_again = "sanitize sample: 22 path cases run, 0 law failure(s) (the gate judges those); 2 run(s) again after " \
                "running out of GPU memory beside other processes"
    tail = refused + [ran_again, "========= ERROR SUMMARY: 2 errors"]
    assert refused_allocations(tail) == 2 and tool_verdict(99, tail) == "clean"
    # An error of another kind beside them, or no word that the cases ran again: the tool's errors stand.
    other = refused + ["========= Invalid __global__ read of size 4 bytes", ran_again, "========= ERROR SUMMARY: 3 errors"]
    assert refused_allocations(other) == 0 and tool_verdict(99, other) == "ERRORS"
    silent = refused + ["========= ERROR SUMMARY: 2 errors"]
    assert tool_verdict(99, silent) == "ERRORS"
