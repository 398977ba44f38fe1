"""`[tool.torchdoctor.lint]` in pyproject.toml, found by walking up from the linted path (the
nearest pyproject.toml that has the table wins, as ruff does):

    [tool.torchdoctor.lint]
    select = ["TD1", "TD2"]          # codes or prefixes; default: all
    ignore = ["TD105"]
    exclude = ["legacy/", "*_pb2.py"]  # on top of .venv, site-packages, .git, ...
    per-file-ignores = { "tests/*" = ["TD201"] }
    max-file-bytes = 4194304
    min-severity = "low"            # info findings ("runtime will decide") are hidden below it

Command-line `--select`/`--ignore` replace the file's lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from torchdoctor.errors import InputError
from torchdoctor.lint.selection import parse_codes
from torchdoctor.lint.source import MAX_FILE_BYTES

try:  # Python ≥ 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10 without tomli: configs are skipped
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ModuleNotFoundError:
        tomllib = None  # type: ignore[assignment]

SEVERITIES = ("high", "medium", "low", "info")
_KEYS = {"select", "ignore", "exclude", "extend-exclude", "per-file-ignores", "max-file-bytes", "min-severity"}


@dataclass
class LintConfig:
    path: Path | None = None  # the pyproject.toml it came from
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    per_file_ignores: list[tuple[str, list[str]]] = field(default_factory=list)
    max_file_bytes: int = MAX_FILE_BYTES
    min_severity: str = "low"

    @property
    def root(self) -> Path | None:
        return self.path.parent if self.path else None


def find_config(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above `start` with a [tool.torchdoctor] table."""
    try:
        here = start.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symbolic link loop (Python < 3.13)
        return None
    for directory in (here, *here.parents) if here.is_dir() else here.parents:
        candidate = directory / "pyproject.toml"
        if candidate.is_file() and _has_our_table(candidate):
            return candidate
    return None


def _has_our_table(path: Path) -> bool:
    try:
        return "torchdoctor" in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def load_config(path: Path | None) -> LintConfig:
    if path is None or tomllib is None:
        return LintConfig()
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path} is not valid TOML ({exc}); fix it or pass --isolated") from None
    table = document.get("tool", {}).get("torchdoctor", {}).get("lint", {})
    if not isinstance(table, dict):
        raise InputError(f"{path}: [tool.torchdoctor.lint] must be a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise InputError(f"{path}: unknown key(s) {', '.join(unknown)} in [tool.torchdoctor.lint]; "
                         f"known: {', '.join(sorted(_KEYS))}")
    where = f"{path} [tool.torchdoctor.lint]"
    config = LintConfig(path=path)
    config.select = parse_codes(_strings(table, "select", where), f"{where} select")
    config.ignore = parse_codes(_strings(table, "ignore", where), f"{where} ignore") or []
    config.exclude = (_strings(table, "exclude", where) or []) + (_strings(table, "extend-exclude", where) or [])
    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict):
        raise InputError(f"{where} per-file-ignores must be a table of glob = [codes]")
    for pattern, codes in per_file.items():
        listed = [codes] if isinstance(codes, str) else codes
        if not isinstance(listed, list) or not all(isinstance(c, str) for c in listed):
            raise InputError(f"{where} per-file-ignores.{pattern} must be a list of codes")
        config.per_file_ignores.append((pattern, parse_codes(listed, f"{where} per-file-ignores") or []))
    size = table.get("max-file-bytes", MAX_FILE_BYTES)
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise InputError(f"{where} max-file-bytes must be a positive integer")
    config.max_file_bytes = size
    severity = table.get("min-severity", "low")
    if severity not in SEVERITIES:
        raise InputError(f"{where} min-severity must be one of {', '.join(SEVERITIES)}")
    config.min_severity = severity
    return config


def _strings(table: dict, key: str, where: str) -> list[str] | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where} {key} must be a list of strings")
    return value
