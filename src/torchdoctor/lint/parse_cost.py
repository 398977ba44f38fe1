"""Inputs whose parse alone would take minutes. CPython before 3.12 locates each `{...}` of an
f-string by rescanning the literal from its start, so an f-string of L characters with k
placeholders costs about k·L steps: 40,000 placeholders in a 120,000-character f-string took
1.6 s on the 2-core benchmark machine, and the 4 MiB size cap would allow one that takes half an
hour. Such a file is generated, not trained with; it is skipped with a message instead.

Only files with many braces are tokenized to look (torch's own tree has none: its highest
braces × bytes product is 3e9, a third of the threshold).
"""

from __future__ import annotations

import io
import sys
import tokenize

_BRACES_TIMES_BYTES = 1e10  # below this no f-string of the file can cost COST_LIMIT
_COST_LIMIT = 3e10  # placeholders × characters of one f-string: about 10 s of parsing


def slow_to_parse(text: str) -> str | None:
    """Why parsing `text` would take too long, or None."""
    if sys.version_info >= (3, 12) or text.count("{") * len(text) < _BRACES_TIMES_BYTES:
        return None
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type != tokenize.STRING:
                continue
            prefix = token.string[: len(token.string) - len(token.string.lstrip("rRbBuUfF"))]
            if "f" in prefix.lower():
                placeholders = token.string.count("{")
                if placeholders * len(token.string) > _COST_LIMIT:
                    return (f"an f-string of {len(token.string):,} characters with {placeholders:,} placeholders at "
                            f"line {token.start[0]}: Python {sys.version_info[0]}.{sys.version_info[1]}'s parser "
                            f"takes time in proportion to their product (generated code?)")
    except (tokenize.TokenError, SyntaxError):
        return None  # the parser will say what is wrong
    return None
