"""Which codes to report: `--select`/`--ignore` by code or prefix (`TD2`, `TD201`, `ALL`), and
per-file ignores from the config. As in ruff and flake8, the more specific selector wins when
a code matches both lists (`--select TD2 --ignore TD203` reports TD201 but not TD203)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from torchdoctor.errors import UsageError
from torchdoctor.rules.registry import CATALOGUE


def parse_codes(values: list[str] | str | None, where: str) -> list[str] | None:
    """`["TD2,TD301", "td105"]` → ["TD2", "TD301", "TD105"]; unknown selectors are usage errors."""
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    codes = [c.strip().upper() for v in values for c in v.split(",") if c.strip()]
    known = [r.code for r in CATALOGUE]
    for code in codes:
        if code != "ALL" and not any(k.startswith(code) for k in known):
            raise UsageError(f"{where}: no rule code starts with {code!r}; `torchdoctor rules` lists them")
    return ["" if c == "ALL" else c for c in codes]


@dataclass
class Selection:
    select: list[str] | None = None  # None: everything
    ignore: list[str] = field(default_factory=list)
    per_file: list[tuple[str, list[str]]] = field(default_factory=list)  # (glob, codes)

    def wants(self, code: str, path: str = "") -> bool:
        chosen = _longest(code, [""] if self.select is None else self.select)
        ignored = _longest(code, self.ignore + self._file_ignores(path))
        return chosen is not None and (ignored is None or len(chosen) > len(ignored))

    def wants_any(self, codes: tuple[str, ...]) -> bool:
        return any(self.wants(c) or self.per_file for c in codes)

    def _file_ignores(self, path: str) -> list[str]:
        if not path or not self.per_file:
            return []
        return [c for pattern, codes in self.per_file if _path_matches(path, pattern) for c in codes]


def _longest(code: str, prefixes: list[str]) -> str | None:
    matching = [p for p in prefixes if code.startswith(p)]
    return max(matching, key=len) if matching else None


def _path_matches(path: str, pattern: str) -> bool:
    path = path.replace("\\", "/")
    return fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path.rsplit("/", 1)[-1], pattern) or (
        path.startswith(pattern.rstrip("/") + "/"))
