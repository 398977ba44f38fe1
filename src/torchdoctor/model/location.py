"""A place in the user's source: the one vocabulary runs, lint, traces and reports share.

Its own module so that the run record and the trace summary (which the record embeds) can
both use it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Location:
    path: str
    line: int
    function: str = ""

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"
