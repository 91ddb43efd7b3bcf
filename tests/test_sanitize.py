"""compute-sanitizer's output is summarised by its count of errors (the tool itself runs only on
the GPU lane: `python3 -m harness sanitize`)."""

from harness.sanitize import summary_line


def test_the_summary_is_the_count_not_the_note_after_it():
    # The tail of a memcheck run over the cuda_fwd_tail_past_row mutant on the H200.
    lines = ["=========     Host Frame: ...", "========= ERROR SUMMARY: 22 errors",
             "========= ERROR SUMMARY: 2 errors were not printed. Use --print-limit option to adjust the number of "
             "printed errors"]
    assert summary_line(lines) == "========= ERROR SUMMARY: 22 errors"
    race = ["rmsnorm sanitize inner: 24 cases", "========= RACECHECK SUMMARY: 20 hazards displayed (22 errors, 38 warnings)"]
    assert summary_line(race) == race[1]
    assert summary_line(["no summary at all"]) == "no summary at all" and summary_line([]) == ""
