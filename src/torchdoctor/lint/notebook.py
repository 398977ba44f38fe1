"""Jupyter notebooks: the code cells joined into one module (later cells see earlier imports, as
in a kernel), IPython magics and shell escapes blanked out line for line, and a map from the
joined module's lines back to `cell N, line L` for reporting."""

from __future__ import annotations

import ast
import bisect
import json
import re
from dataclasses import dataclass

# `%time x`, `!pip install`, `x = !ls`, `y = %env`, `obj?`: IPython syntax, not Python.
_MAGIC_LINE = re.compile(r"^\s*(?:[%!]|\w[\w.]*\s*=\s*[%!])|^[^#'\"]*\?\??\s*$")
# Cell magics whose body is still Python (the rest — %%bash, %%writefile — is not).
_PYTHON_CELL_MAGICS = ("%%time", "%%timeit", "%%capture", "%%prun", "%%debug")


class NotebookError(ValueError):
    """The file is not a readable nbformat-4 notebook."""


@dataclass
class CellMap:
    starts: list[int]  # first line (1-based) of each code cell in the joined module
    numbers: list[int]  # each code cell's 1-based position among all the notebook's cells

    def locate(self, line: int) -> tuple[int, int]:
        """(cell number, line within the cell) of a line of the joined module."""
        i = max(bisect.bisect_right(self.starts, line) - 1, 0)
        return self.numbers[i], line - self.starts[i] + 1

    def cell_lines(self, index: int, total_lines: int) -> range:
        end = self.starts[index + 1] if index + 1 < len(self.starts) else total_lines + 1
        return range(self.starts[index], end)


def read_notebook(raw: bytes) -> tuple[str, CellMap]:
    try:
        document = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotebookError(f"not a notebook (invalid JSON: {exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("cells"), list):
        raise NotebookError("not a notebook (no `cells` list; nbformat 4 expected)")
    lines: list[str] = []
    starts, numbers = [], []
    for number, cell in enumerate(document["cells"], 1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        starts.append(len(lines) + 1)
        numbers.append(number)
        lines.extend(_python_lines(text.split("\n")))
    return "\n".join(lines) + "\n", CellMap(starts, numbers)


def _python_lines(cell: list[str]) -> list[str]:
    first = cell[0].strip() if cell else ""
    if first.startswith("%%"):
        if not first.startswith(_PYTHON_CELL_MAGICS):
            return [""] * len(cell)  # %%bash, %%writefile ...: not Python at all
        cell = [""] + cell[1:]
    magic = [bool(_MAGIC_LINE.match(line)) for line in cell]
    if any(magic) and _parses("\n".join(cell)):
        return cell  # `% x` continuing a multi-line expression is Python, not a magic
    # Keep the line count (locations must map back) and the indentation (a blanked line in a
    # block would leave the block empty): a magic becomes `pass` at its indentation.
    return [_blank(line) if is_magic else line for line, is_magic in zip(cell, magic)]


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def _blank(line: str) -> str:
    indent = line[: len(line) - len(line.lstrip())]
    return f"{indent}pass"


def blank_cell(text: str, cells: CellMap, index: int) -> str:
    """The joined module with one cell's lines emptied (a cell that does not parse)."""
    lines = text.split("\n")
    for line in cells.cell_lines(index, len(lines)):
        if line - 1 < len(lines):
            lines[line - 1] = ""
    return "\n".join(lines)
