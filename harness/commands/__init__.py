"""The subcommands of the command line (harness/cli.py dispatches to them), one module each: build,
gate, fuzz, replay."""
