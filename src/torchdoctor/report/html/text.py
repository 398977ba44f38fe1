"""Strings into HTML: every user string passes through `esc` (or `prose`, which escapes
before it marks up), so a path, message or name holding `<script>` shows as text.

Control characters are made visible first (`common.plain`), as in the other renderers.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from typing import Any

from torchdoctor.report.common import fmt_value, one_line, plain

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")


def esc(text: Any) -> str:
    """Text (or a value's string form) escaped for element content and quoted attributes."""
    return html.escape(plain(str(text)), quote=True)


def esc_line(text: Any) -> str:
    """Like `esc`, on one line: for headings, table cells, paths and attribute values."""
    return html.escape(one_line(str(text)), quote=True)


def code(text: Any) -> str:
    return f"<code>{esc_line(text)}</code>"


def prose(text: str) -> str:
    """Rule-written text: paragraphs (line breaks kept), `code spans`, fenced code blocks.

    Everything is escaped first; only the backtick syntax becomes markup, and that syntax
    survives escaping unchanged, so no user string can add an element or an attribute.
    """
    out: list[str] = []
    paragraph: list[str] = []
    block: list[str] | None = None
    fence = ""
    for line in plain(text).split("\n"):
        match = _FENCE.match(line)
        if block is None and match:
            out.append(_paragraph(paragraph))
            paragraph, block, fence = [], [], match.group(1)
        elif block is not None and match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                and not match.group(2).strip():
            out.append(f"<pre><code>{html.escape(chr(10).join(block))}</code></pre>")
            block = None
        elif block is not None:
            block.append(line)
        elif not line.strip():
            out.append(_paragraph(paragraph))
            paragraph = []
        else:
            paragraph.append(line)
    if block is not None:  # an unclosed fence keeps its lines as code
        out.append(f"<pre><code>{html.escape(chr(10).join(block))}</code></pre>")
    out.append(_paragraph(paragraph))
    return "".join(out)


def _paragraph(lines: list[str]) -> str:
    return f'<p class="prose">{inline(chr(10).join(lines))}</p>' if lines else ""


def inline(text: str) -> str:
    """Escaped text whose `code spans` show as code: for one-paragraph strings such as a basis.
    The page never shows a literal backtick: rule-written text marks code with them."""
    escaped = html.escape(plain(text), quote=True)
    return _CODE_SPAN.sub(lambda m: f"<code>{m.group(2)}</code>", escaped)


def inline_line(text: Any) -> str:
    """`inline` on one line: for titles, table cells and captions written by rules."""
    escaped = html.escape(one_line(str(text)), quote=True)
    return _CODE_SPAN.sub(lambda m: f"<code>{m.group(2)}</code>", escaped)


def table(columns: Sequence[Any], rows: Iterable[Sequence[Any]], cls: str = "grid",
          numeric: Sequence[bool] | None = None) -> str:
    """A table of plain values (escaped here); `numeric` right-aligns those columns."""
    align = list(numeric or [False] * len(columns))
    head = "".join(f"<th{_num(align, i)}>{inline_line(c)}</th>" for i, c in enumerate(columns))
    body = "".join("<tr>" + "".join(f"<td{_num(align, i)}>{inline_line(fmt_value(v))}</td>" for i, v in enumerate(row))
                   + "</tr>" for row in rows)
    # wide tables scroll inside their box: a header never has to break inside a word (style.py)
    return f'<div class="table-wrap"><table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _num(align: list[bool], i: int) -> str:
    return ' class="num"' if i < len(align) and align[i] else ""


def facts(rows: Iterable[tuple[str, str]]) -> str:
    """Label/value pairs (both plain text) as a definition list."""
    items = "".join(f"<div><dt>{esc_line(label)}</dt><dd>{inline_line(value)}</dd></div>" for label, value in rows)
    return f'<dl class="facts">{items}</dl>'


def note(text: str, cls: str = "note") -> str:
    return f'<p class="{cls}">{inline(text)}</p>'
