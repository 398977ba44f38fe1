"""Reading one file to lint: bytes → text in its declared encoding (PEP 263 cookie or BOM,
UTF-8 otherwise), a size cap, notebooks as joined code cells. Every failure is a `Problem`
naming the file and what to do; the other files are linted regardless."""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

from torchdoctor.model.units import MIB, format_bytes
from torchdoctor.lint.notebook import CellMap, NotebookError, read_notebook

# 4 MiB: three times torch's largest hand-written module (common_methods_invocations.py,
# 1.3 MiB); larger .py files are generated (protobuf, vendored bundles) and parsing one costs
# seconds without any training habit to find. `max-file-bytes` in the config raises it.
MAX_FILE_BYTES = 4 * MIB


@dataclass
class SourceFile:
    path: Path  # on disk
    display: str  # as the user would type it
    text: str  # Python source; for a notebook its code cells joined
    encoding: str = "utf-8"
    cells: CellMap | None = None

    @property
    def is_notebook(self) -> bool:
        return self.cells is not None


@dataclass
class Problem:
    """A file (or part of one) that could not be linted, and why."""

    display: str
    message: str
    line: int = 0
    column: int = 0
    cell: int | None = None
    fatal: bool = True  # nothing of the file was linted (a notebook may lose only one cell)

    def __str__(self) -> str:
        where = self.display
        if self.cell is not None:
            where += f":cell {self.cell}"
        if self.line:
            where += f":{self.line}:{self.column or 1}"
        return f"{where}: {self.message}"


def read_source(path: Path, display: str, max_bytes: int = MAX_FILE_BYTES) -> SourceFile | Problem:
    try:
        size = path.stat().st_size
        if size > max_bytes:
            return Problem(display, f"skipped: {format_bytes(size)} is over the {format_bytes(max_bytes)} "
                                    f"limit (raise `max-file-bytes` in [tool.torchdoctor.lint] to lint it)")
        raw = path.read_bytes()
    except OSError as exc:
        return Problem(display, f"cannot read: {exc.strerror or exc}")
    if path.suffix == ".ipynb":
        try:
            text, cells = read_notebook(raw)
        except NotebookError as exc:
            return Problem(display, str(exc))
        return SourceFile(path, display, text, "utf-8", cells)
    return decode_python(raw, path, display)


def decode_python(raw: bytes, path: Path, display: str) -> SourceFile | Problem:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as exc:  # a coding cookie naming an unknown encoding, or BOM + other cookie
        if "missing encoding declaration" not in exc.msg:
            return Problem(display, f"cannot decode: {exc.msg}")
        encoding = "utf-8"  # no cookie, and the first lines are not UTF-8: say which byte is wrong
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return Problem(display, f"not valid {encoding} (byte 0x{raw[exc.start]:02x}); save it as UTF-8 "
                                f"or declare its encoding with a `# -*- coding: <name> -*-` first line", line)
    if text.startswith("\ufeff"):
        text = text[1:]
    return SourceFile(path, display, text, encoding)
