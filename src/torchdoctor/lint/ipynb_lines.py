"""Where a notebook cell's lines are in the .ipynb file itself. A SARIF region counts lines of
the artifact, and a notebook's artifact is its JSON text, not the cell: "cell 3, line 2" must
become the line of the .ipynb that holds that source line. nbformat writes every source line
as a JSON string of its own, one per line of the file, so a cell line maps to the file line of
the string it starts in (a cell stored as one string maps all its lines to that string's line).
"""

from __future__ import annotations

import bisect
import json
import json.decoder
import json.scanner
import re

CellLine = tuple[int, int]  # (cell number among all cells, 1-based line in the cell)


def cell_line_map(raw: bytes) -> dict[CellLine, int] | None:
    """(cell, line in the cell) → line in the .ipynb file; None when the file cannot be read so."""
    try:
        text = raw.decode("utf-8-sig")
        document, offsets = _parse_with_offsets(text)
    except (UnicodeDecodeError, ValueError, StopIteration):
        return None
    cells = document.get("cells") if isinstance(document, dict) else None
    cell_offsets = offsets.get("cells") if isinstance(offsets, dict) else None
    if not isinstance(cells, list) or not isinstance(cell_offsets, list):
        return None
    newlines = [m.start() for m in re.finditer("\n", text)]
    mapping: dict[CellLine, int] = {}
    for number, (cell, where) in enumerate(zip(cells, cell_offsets), 1):
        if not isinstance(cell, dict) or not isinstance(where, dict):
            continue
        source, source_at = cell.get("source"), where.get("source")
        parts = list(zip(source, source_at)) if isinstance(source, list) and isinstance(source_at, list) else [
            (source, source_at)]
        line = 1
        for part, offset in parts:
            if not isinstance(part, str) or not isinstance(offset, int):
                continue
            file_line = bisect.bisect_left(newlines, offset) + 1
            breaks = part.count("\n")
            starting_here = breaks if part.endswith("\n") else breaks + 1  # lines that start in this part
            for cell_line in range(line, line + starting_here):
                mapping.setdefault((number, cell_line), file_line)
            line += breaks
    return mapping


def _parse_with_offsets(text: str):
    """The document, and a mirror of it holding each string value's offset in `text` (json
    reads object keys with a separate scanner, so only values are recorded, in document order)."""
    offsets: list[int] = []
    decoder = json.JSONDecoder()

    def parse_string(string: str, end: int, strict: bool):
        offsets.append(end - 1)  # `end` is just past the opening quote
        return json.decoder.scanstring(string, end, strict)
    decoder.parse_string = parse_string
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # the C scanner cannot be hooked
    document = decoder.decode(text)
    positions = iter(offsets)
    mirror = _mirror(document, positions)
    if next(positions, None) is not None:
        raise ValueError("duplicate keys: string values and offsets do not line up")
    return document, mirror


def _mirror(node, positions):
    if isinstance(node, str):
        return next(positions)
    if isinstance(node, dict):
        return {key: _mirror(value, positions) for key, value in node.items()}
    if isinstance(node, list):
        return [_mirror(value, positions) for value in node]
    return None
