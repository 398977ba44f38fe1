"""Command line: `torchdoctor COMMAND ...`. Each subcommand lives in `commands/<name>.py` as a
`main(argv) -> int`; domain errors become exit codes here, and only here.

The table below is static on purpose: a command's module is imported only when that command
runs, so `lint` (started by pre-commit on every commit) never pays for torch, and `rules`
never for the linter.
"""

from __future__ import annotations

import importlib
import sys
from typing import Sequence

from torchdoctor.version import __version__
from torchdoctor.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, TorchdoctorError, UsageError

# name -> (module under torchdoctor.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run a training script under the probes and diagnose it"),
    "report": ("report", "re-render a run directory without re-running"),
    "compare": ("compare", "compare run directories: before/after table, noise-aware ratios"),
    "tune": ("tune", "run a baseline, try the knobs its findings suggest, and measure each one"),
    "memory": ("memory", "memory and samples/s at several batch sizes; the largest batch that fits"),
    "rules": ("rules", "list the rules, or explain one (torchdoctor rules TD301)"),
    "lint": ("lint", "find slow-training habits in source files without running them"),
    "trace": ("trace", "explain torch.profiler (Kineto) traces"),
    "comm": ("comm", "measure all-reduce bandwidth between ranks here, and what the link should give"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return (f"torchdoctor {__version__}: why is my PyTorch training slow?\n"
            f"usage: torchdoctor COMMAND ...   (torchdoctor COMMAND --help)\n\ncommands:\n"
            + "\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(_usage())
        return EXIT_OK if argv else EXIT_USAGE
    if argv[0] == "--version":
        sys.stdout.write(f"torchdoctor {__version__}\n")
        return EXIT_OK
    try:
        if argv[0] not in COMMANDS:
            raise UsageError(f"unknown command {argv[0]!r}; choose one of: {', '.join(COMMANDS)}")
        module = importlib.import_module(f"torchdoctor.commands.{COMMANDS[argv[0]][0]}")
        return module.main(argv[1:])
    except TorchdoctorError as exc:
        sys.stderr.write(f"torchdoctor: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("torchdoctor: interrupted\n")
        return EXIT_INTERRUPTED
    except SystemExit as exc:  # argparse --help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
