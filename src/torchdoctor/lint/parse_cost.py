"""Inputs whose parse alone would take minutes. CPython before 3.12 locates each `{...}` of an
f-string by rescanning the literal from its start, so an f-string of L characters with k
placeholders costs about k·L steps: 40,000 placeholders in a 120,000-character f-string took
1.6 s on the 2-core benchmark machine, and the 4 MiB size cap would allow one that takes half an
hour. Such a file is generated, not trained with; it is skipped with a message instead.

Only files whose braces × bytes reach the limit can hold such an f-string (torch's own tree
peaks at a tenth of it); their f-strings are found with one regular-expression pass.
"""

from __future__ import annotations

import re
import sys

_COST_LIMIT = 3e10  # placeholders × characters of one f-string: about 10 s of parsing
_FSTRING_START = re.compile(r"""(?<![\w'"])(?:[fF][rR]?|[rR][fF])('''|\"\"\"|'|")""")


def slow_to_parse(text: str) -> str | None:
    """Why parsing `text` would take too long, or None."""
    if sys.version_info >= (3, 12) or text.count("{") * len(text) < _COST_LIMIT:
        return None
    for match in _FSTRING_START.finditer(text):
        quote, start = match.group(1), match.end()
        end = text.find(quote, start)  # an escaped quote ends it early: the estimate never exceeds the cost
        if len(quote) == 1:
            newline = text.find("\n", start)
            end = min(e for e in (end, newline, len(text)) if e >= 0)
        elif end < 0:
            end = len(text)
        placeholders = text.count("{", start, end)
        if placeholders * (end - start) > _COST_LIMIT:
            line = text.count("\n", 0, match.start()) + 1
            return (f"an f-string of {end - start:,} characters with {placeholders:,} placeholders at line {line}: "
                    f"Python {sys.version_info[0]}.{sys.version_info[1]}'s parser takes time in proportion to "
                    f"their product (generated code?)")
    return None
