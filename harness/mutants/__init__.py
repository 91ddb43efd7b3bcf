"""Mutants: this project's extension with one bug planted. The catalogue (catalogue: each mutant a list of
exact text edits of the sources, with the class of real bug it stands for), the incremental builder of
their scratch trees (builder), and the killing case kept for each (kills/DEVICE/NAME.json). A mutant is a
target like any other (``mutant:NAME``); the score over the catalogue is harness.tools.mutate."""
