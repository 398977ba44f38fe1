"""Command line: `torchdoctor COMMAND ...`. Each subcommand lives in `commands/<name>.py` as a
`main(argv) -> int`; domain errors become exit codes here, and only here.

The list below is static on purpose: a command's module is imported only when that command
runs, so `lint` (started by pre-commit on every commit) never pays for torch, and `rules`
never for the linter.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path
from typing import Sequence

from torchdoctor.version import __version__
from torchdoctor.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED, EXIT_USAGE, TorchdoctorError, UsageError

# the commands, in the order `torchdoctor --help` lists them; each is commands/<name>.py
COMMANDS = ("run", "report", "compare", "tune", "memory", "rules", "lint", "trace", "comm")
COMMANDS_DIR = Path(__file__).resolve().parent / "commands"


def command_help(name: str) -> str:
    """A command's one-line help, its module's `HELP`, read from the source: listing the
    commands imports none of them."""
    tree = ast.parse((COMMANDS_DIR / f"{name}.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "HELP" for t in node.targets):
            return ast.literal_eval(node.value)
    return ""


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {command_help(name)}" for name in COMMANDS]
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
    from torchdoctor.run.signals import handling_stop_signals

    try:
        if argv[0] not in COMMANDS:
            raise UsageError(f"unknown command {argv[0]!r}; choose one of: {', '.join(COMMANDS)}")
        # SIGTERM (a scheduler, `timeout`) stops a command as Ctrl-C does: what was measured is written
        with handling_stop_signals():
            module = importlib.import_module(f"torchdoctor.commands.{argv[0]}")
            return module.main(argv[1:])
    except TorchdoctorError as exc:
        sys.stderr.write(f"torchdoctor: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt as exc:  # Terminated (SIGTERM) is one too: 143
        code = getattr(exc, "exit_code", EXIT_INTERRUPTED)
        sys.stderr.write(f"torchdoctor: {'terminated (SIGTERM)' if code == EXIT_TERMINATED else 'interrupted'}\n")
        return code
    except SystemExit as exc:  # argparse --help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
