"""The argument parser every subcommand uses: errors become one-line UsageErrors (exit 2 in
cli.main) instead of argparse printing usage and calling sys.exit itself."""

from __future__ import annotations

import argparse

from torchdoctor.errors import UsageError


class CommandParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message}; see `torchdoctor {self.prog.split()[-1]} --help`")
