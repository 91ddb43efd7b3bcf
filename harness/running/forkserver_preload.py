"""Imported first by the worker processes' fork server (harness.running.worker's preload): it ignores
Ctrl-C before anything else, so that the server, which imports torch for a few seconds before it
would ignore Ctrl-C itself, does not die of a terminal's interrupt meant for the run (the run's
own process handles it and stops the workers). Then the C heap every worker inherits keeps freed
memory (harness.running.heap), and the modules every worker needs, frozen out of the garbage collector's
walks."""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)

from harness.running.heap import keep_freed_memory  # noqa: E402

keep_freed_memory()

import torch  # noqa: E402,F401

import harness.judging.laws  # noqa: E402,F401

from harness.running.heap import freeze_imported_objects  # noqa: E402

# What the imports made lives as long as every worker forked from here.
freeze_imported_objects()
