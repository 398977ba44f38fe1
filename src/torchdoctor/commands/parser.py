"""The argument parser every subcommand uses: errors become one-line UsageErrors (exit 2 in
cli.main) instead of argparse printing usage and calling sys.exit itself."""

from __future__ import annotations

import argparse
from typing import Callable, TypeVar

from torchdoctor.errors import UsageError

Number = TypeVar("Number", int, float)


class CommandParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message}; see `torchdoctor {self.prog.split()[-1]} --help`")


def non_negative(kind: Callable[[str], Number]) -> Callable[[str], Number]:
    """An argparse type: `kind(text)`, refused when below zero."""
    def parse(text: str) -> Number:
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be ≥ 0, got {text}")
        return value
    return parse
