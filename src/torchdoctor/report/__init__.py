"""Renderers: Report → text. They format; they never measure. One signature for all:
`(report: Report) -> str`, looked up by format name in RENDERERS."""

from __future__ import annotations

from typing import Callable

from torchdoctor.findings import Report
from torchdoctor.report.json_ import render_json
from torchdoctor.report.markdown import render_markdown
from torchdoctor.report.terminal import render_text

RENDERERS: dict[str, Callable[[Report], str]] = {
    "text": render_text,
    "md": render_markdown,
    "json": render_json,
}


def render(report: Report, fmt: str) -> str:
    """`report` in format `fmt`; ValueError naming the valid formats for an unknown one."""
    try:
        renderer = RENDERERS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(RENDERERS)}") from None
    return renderer(report)


__all__ = ["RENDERERS", "render", "render_json", "render_markdown", "render_text"]
