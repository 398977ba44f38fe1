"""Renderers: Report → text. They format; they never measure. One signature for all:
`(report: Report) -> str`, looked up by format name in RENDERERS.

A renderer's module is imported when its format is first used: the terminal renderer pulls
in rich, which `--format json` and `lint`'s own formats never need.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping

from torchdoctor.findings import Report

Renderer = Callable[[Report], str]
_WHERE = {
    "text": ("torchdoctor.report.terminal", "render_text"),
    "md": ("torchdoctor.report.markdown", "render_markdown"),
    "json": ("torchdoctor.report.json_", "render_json"),
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


__all__ = ["RENDERERS", "render"]
