"""Making strings safe for Markdown (CommonMark + GitHub tables).

Every string in a Report may carry text from the user's code (paths, function names,
exception messages), so nothing goes into report.md unescaped. Three kinds of context:

- `cell`: plain text inside a table cell — no newlines, no pipes, no markup at all;
- `code`: an identifier shown literally in a code span (paths, slugs, keys);
- `prose`: text written by rules, which may use `code spans` and fenced code blocks on
  purpose; only raw HTML is neutralized, and only outside code (where it is inert).
"""

from __future__ import annotations

import re

from torchdoctor.report.common import one_line, plain

# Characters that start Markdown/GFM inline syntax. `_` is handled separately below.
_ALWAYS_ESCAPE = set("\\`*[]<>|&~")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def cell(text: str) -> str:
    """Plain text that renders literally, on one line, even inside a table cell."""
    text = one_line(text)
    out = []
    for i, ch in enumerate(text):
        if ch in _ALWAYS_ESCAPE:
            out.append("\\" + ch)
        elif ch == "_" and not _intraword(text, i):
            # `my_var` never turns into emphasis, `__init__` does: escape only the latter
            # kind so the raw file stays readable.
            out.append("\\_")
        else:
            out.append(ch)
    return "".join(out)


def _intraword(text: str, i: int) -> bool:
    return 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()


def code(text: str, in_table: bool = True) -> str:
    """A code span showing `text` literally, whatever backticks or pipes it holds."""
    text = one_line(text)
    if not text:
        return ""
    if in_table:
        # GFM splits table rows on pipes before it parses code spans; `\|` is its escape.
        text = text.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def prose(text: str) -> str:
    """Rule-written Markdown with user strings inside: keep code, disarm raw HTML.

    `<` outside code becomes `&lt;` (an entity, so no preceding backslash can undo it);
    inside code spans and fenced blocks it is shown literally by Markdown anyway.
    """
    out: list[str] = []
    fence: str | None = None
    for line in plain(text).split("\n"):
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            out.append(line)
        elif fence is not None:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                    and not line.strip()[len(match.group(1)):].strip():
                fence = None
            out.append(line)
        else:
            out.append(_disarm_html(line))
    if fence is not None:
        # An unclosed fence would swallow the rest of the report; close it here.
        out.append(fence)
    return "\n".join(out)


def _disarm_html(line: str) -> str:
    parts = []
    last = 0
    for match in _CODE_SPAN.finditer(line):
        parts.append(line[last:match.start()].replace("<", "&lt;"))
        parts.append(match.group(0))
        last = match.end()
    parts.append(line[last:].replace("<", "&lt;"))
    return "".join(parts)


def heading(text: str) -> str:
    """Prose that has to stay on one line (a heading, a list item): no fences there."""
    return _disarm_html(one_line(text))
