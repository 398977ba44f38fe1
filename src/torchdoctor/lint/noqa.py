"""`# noqa` comments, flake8-style: a bare `# noqa` silences every finding on its line,
`# noqa: TD201, TD3` only those codes (a prefix covers its family; any whitespace may follow
the colon, as ruff allows). Codes of other tools (`# noqa: E501`) leave torchdoctor's findings
alone. `# torchdoctor: noqa` on a line of its own silences the whole file (or, with codes,
those codes in the file).

Only real comments count: the comments are found with `tokenize`, so `"# noqa"` inside a
string silences nothing.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

_LINE = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]*(?:[,\s]+[A-Z]+[0-9]*)*))?", re.IGNORECASE)
_FILE = re.compile(r"^#\s*torchdoctor\s*:\s*noqa(?::\s*(?P<codes>[A-Z0-9,\s]+))?\s*$", re.IGNORECASE)
ALL = frozenset({""})  # the empty prefix: every code


@dataclass
class Suppressions:
    lines: dict[int, frozenset[str]] = field(default_factory=dict)  # line → code prefixes silenced there
    file: frozenset[str] | None = None  # code prefixes silenced in the whole file

    def silences(self, code: str, first_line: int, last_line: int) -> bool:
        """A `# noqa` for `code` on any line of the statement, or for the whole file."""
        if silenced(code, self.file):
            return True
        return bool(self.lines) and any(silenced(code, self.lines.get(i)) for i in range(first_line, last_line + 1))


def suppressions(text: str) -> Suppressions:
    found = Suppressions()
    if "noqa" not in text.lower():
        return found  # most files: no need to tokenize
    file_codes = []
    for line, comment, alone in _comments(text):
        codes = line_suppressions(comment)
        if codes is not None:
            found.lines[line] = found.lines.get(line, frozenset()) | codes
        match = _FILE.match(comment) if alone else None
        if match:
            file_codes.append(_codes(match.group("codes")))
    found.file = frozenset().union(*file_codes) if file_codes else None
    return found


def _comments(text: str):
    """(line, comment text, alone on its line) for every comment of the source."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string, token.line[: token.start[1]].strip() == ""
    except (tokenize.TokenError, SyntaxError):
        return  # the parser accepted the file, so this is rare; what was read so far counts


def _codes(text: str | None) -> frozenset[str]:
    if not text:
        return ALL
    return frozenset(c.upper() for c in re.split(r"[,\s]+", text.strip()) if c)


def line_suppressions(comment: str) -> frozenset[str] | None:
    """Code prefixes a comment's `# noqa` silences (ALL for a bare one), None without one."""
    if "noqa" not in comment.lower():
        return None
    match = _LINE.search(comment)
    return _codes(match.group("codes")) if match else None


def silenced(code: str, prefixes: frozenset[str] | None) -> bool:
    return prefixes is not None and any(code.startswith(p) for p in prefixes)
