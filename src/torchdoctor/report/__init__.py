"""Renderers: Report → text. They format; they never measure. One signature for all:
`(report: Report) -> str`, looked up by format name in RENDERERS.

A renderer's module is imported when its format is first used: the terminal renderer pulls
in rich, which `--format json` and `lint`'s own formats never need.

`emit` is what commands print with: the same renderers, and severity in colour when the
text goes to a terminal (never into a pipe or a file, never with NO_COLOR set).
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TextIO

from torchdoctor.model.findings import Report

Renderer = Callable[[Report], str]
_WHERE = {
    "text": ("torchdoctor.report.terminal", "render_text"),
    "md": ("torchdoctor.report.markdown", "render_markdown"),
    "json": ("torchdoctor.report.json_", "render_json"),
    "html": ("torchdoctor.report.html", "render_html"),
}


class _Renderers(Mapping[str, Renderer]):
    def __getitem__(self, fmt: str) -> Renderer:
        module, name = _WHERE[fmt]
        return getattr(importlib.import_module(module), name)

    def __iter__(self) -> Iterator[str]:
        return iter(_WHERE)

    def __len__(self) -> int:
        return len(_WHERE)


RENDERERS: Mapping[str, Renderer] = _Renderers()


def render(report: Report, fmt: str) -> str:
    """`report` in format `fmt`; ValueError naming the valid formats for an unknown one."""
    try:
        renderer = RENDERERS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(RENDERERS)}") from None
    return renderer(report)


def wants_color(stream: TextIO) -> bool:
    """Colour only for a terminal: not in a pipe or file, not with NO_COLOR (no-color.org) or TERM=dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def emit(report: Report, fmt: str, stream: TextIO | None = None) -> None:
    """Print `report` in format `fmt` to `stream` (stdout), coloured where `wants_color`."""
    stream = stream or sys.stdout
    if fmt == "text":
        from torchdoctor.report.terminal import render_text

        stream.write(render_text(report, color=wants_color(stream), width=text_width()))
    else:
        stream.write(render(report, fmt))


def text_width() -> int:
    """The terminal's width (COLUMNS first, as shells set it), or 100 in a pipe or file."""
    columns = shutil.get_terminal_size(fallback=(DEFAULT_WIDTH, 24)).columns
    return max(MIN_WIDTH, columns)


DEFAULT_WIDTH = 100
MIN_WIDTH = 60  # narrower, the tables cannot show a path and its line at all

__all__ = ["RENDERERS", "emit", "render", "text_width", "wants_color"]
