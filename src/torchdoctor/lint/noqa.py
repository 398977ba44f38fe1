"""`# noqa` comments, flake8-style: a bare `# noqa` silences every finding on its line,
`# noqa: TD201, TD3` only those codes (a prefix covers its family). Codes of other tools
(`# noqa: E501`) leave torchdoctor's findings alone. `# torchdoctor: noqa` on a line of its
own silences the whole file (or, with codes, those codes in the file)."""

from __future__ import annotations

import re

_LINE = re.compile(r"#\s*noqa(?::[\s]?(?P<codes>[A-Z]+[0-9]*(?:[,\s]+[A-Z]+[0-9]*)*))?", re.IGNORECASE)
_FILE = re.compile(r"^\s*#\s*torchdoctor\s*:\s*noqa(?::\s*(?P<codes>[A-Z0-9,\s]+))?\s*$",
                   re.IGNORECASE | re.MULTILINE)
ALL = frozenset({""})  # the empty prefix: every code


def _codes(text: str | None) -> frozenset[str]:
    if not text:
        return ALL
    return frozenset(c.upper() for c in re.split(r"[,\s]+", text.strip()) if c)


def line_suppressions(line: str) -> frozenset[str] | None:
    """Code prefixes a line's `# noqa` silences (ALL for a bare one), None without one."""
    if "noqa" not in line.lower():
        return None
    match = _LINE.search(line)
    return _codes(match.group("codes")) if match else None


def file_suppressions(text: str) -> frozenset[str] | None:
    if "torchdoctor" not in text:
        return None
    found = [_codes(m.group("codes")) for m in _FILE.finditer(text)]
    return frozenset().union(*found) if found else None


def silenced(code: str, prefixes: frozenset[str] | None) -> bool:
    return prefixes is not None and any(code.startswith(p) for p in prefixes)
