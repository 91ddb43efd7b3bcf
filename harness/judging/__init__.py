"""What is right: the cases the laws draw (cases), what a target declares or is inferred to support
(contract, refusals), the float64 references and rounding bounds (reference, tolerance), comparing and
diagnosing outputs (judge, story), and the laws themselves (laws/). Nothing here starts a process or
knows the command line: the running/ room calls it."""
