"""The exit codes of every command, and the set-up error that gives code 2."""

EXIT_PASSED, EXIT_FAILED, EXIT_SETUP, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143
EXIT_CODES = ("exit codes: 0 passed; 1 the target failed (a law broke, or too few cases were checked), however "
              "the run stopped; 2 usage or set-up error (no GPU, the target does not build or import, toolchain "
              "broken), or the target not judged (Triton's interpreter cannot run its kernel); 130 interrupted by "
              "Ctrl-C (SIGINT) and 143 by SIGTERM, with nothing failed: the report of what was checked is printed "
              "either way")


class SetupError(Exception):
    """The run cannot judge the target here: one line saying why, before any test runs."""


class NotJudgedError(SetupError):
    """Triton's interpreter cannot run the target's kernel: the target is neither failed nor passed (code 2,
    one line saying what the interpreter raised, and where)."""
