"""Which files a `torchdoctor lint PATH...` covers: Python files and notebooks under the given
directories, skipping virtualenvs, build output and VCS folders (any folder with a
`pyvenv.cfg` is a virtualenv, whatever its name), each file once however many symlinks lead
to it, and never looping through a symlink that points back up the tree. A symbolic link inside
a folder being searched is followed only while it stays inside that folder (`up -> ..` is not
followed into the parent); a link named on the command line is followed wherever it leads. A
path named on the command line is linted even inside an excluded folder, unless `force_exclude`
(ruff's `--force-exclude`, for pre-commit, which names every changed file) applies the excludes
to it too."""

from __future__ import annotations

import errno
import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path

from torchdoctor.model.paths import typed_path
from torchdoctor.lint.source import Problem

# The folders ruff and flake8 skip by default, plus virtualenv spellings and our run output.
DEFAULT_EXCLUDES = frozenset({
    ".bzr", ".direnv", ".eggs", ".git", ".hg", ".ipynb_checkpoints", ".mypy_cache", ".nox", ".pants.d",
    ".pytest_cache", ".pytype", ".ruff_cache", ".svn", ".tox", ".venv", "__pycache__", "__pypackages__",
    "_build", "buck-out", "build", "dist", "node_modules", "site-packages", "venv", "torchdoctor-runs",
})
SUFFIXES = (".py", ".ipynb")


@dataclass
class Discovered:
    files: list[tuple[Path, str]] = field(default_factory=list)  # (path on disk, display path)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def display_path(path: Path, cwd: Path) -> str:
    """As the user would type it (model/paths.py's rule), with / separators."""
    return Path(typed_path(str(path), str(cwd))).as_posix()


def discover(targets: list[Path], excludes: list[str] = (), root: Path | None = None,
             cwd: Path | None = None, force_exclude: bool = False) -> Discovered:
    cwd = cwd or Path.cwd()
    found = Discovered()
    seen_files: set[tuple[int, int]] = set()
    excluder = _Excluder(excludes, root)
    for target in targets:
        shown = display_path(target, cwd)
        if not target.exists():
            found.problems.append(Problem(shown, _missing(target)))
        elif force_exclude and excluder.excludes_path(target, cwd):
            continue
        elif target.is_dir():
            _walk(target, shown, found, seen_files, excluder)
        else:
            _add(target, shown, found, seen_files)
    return found


def force_excluded(path: Path, excludes: list[str], root: Path | None, cwd: Path) -> bool:
    """Whether `--force-exclude` skips `path` (which need not exist: a `--stdin-filename`)."""
    return _Excluder(excludes, root).excludes_path(path, cwd)


class _Excluder:
    def __init__(self, patterns, root: Path | None):
        self.patterns = [p.rstrip("/") for p in patterns]
        self.root = root.resolve() if root else None

    def skips_dir(self, entry: os.DirEntry | Path) -> bool:
        if entry.name in DEFAULT_EXCLUDES:
            return True
        if os.path.exists(os.path.join(entry, "pyvenv.cfg")):
            return True  # a virtualenv, whatever it is called
        return self.matches(entry)

    def matches(self, entry: os.DirEntry | Path) -> bool:
        if not self.patterns:
            return False
        relative = self._relative(os.fspath(entry))
        return any(fnmatch.fnmatch(entry.name, p) or (relative and fnmatch.fnmatch(relative, p))
                   for p in self.patterns)

    def excludes_path(self, path: Path, cwd: Path) -> bool:
        """A path named explicitly, judged as a walk from the root (or the working directory)
        would judge it: the path itself or any folder on the way is excluded."""
        absolute = path if path.is_absolute() else cwd / path
        base = next((b for b in (self.root, cwd.resolve()) if b is not None and _is_under(absolute, b)), None)
        if base is None:
            return self.matches(absolute)  # outside the project: only its own name can match
        relative = _resolved(absolute).relative_to(base)
        if not relative.parts:
            return False  # the project folder itself (`lint --force-exclude .`), whatever its name
        folders = [base.joinpath(*relative.parts[:i]) for i in range(1, len(relative.parts))]
        return self.matches(absolute) or (absolute.is_dir() and self.skips_dir(absolute)) or any(
            self.skips_dir(folder) for folder in folders)

    def _relative(self, path: str) -> str:
        if self.root is None:
            return ""
        try:
            return Path(path).resolve().relative_to(self.root).as_posix()
        except (ValueError, OSError, RuntimeError):
            return ""


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symbolic link loop (Python < 3.13)
        return path


def _missing(target: Path) -> str:
    """Why a named path cannot be read: a symlink loop, a broken link, or nothing there."""
    try:
        os.stat(target)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop (the link points back to itself through other links)"
    return "broken symbolic link" if target.is_symlink() else "no such file or directory"


def _is_under(path: Path, folder: Path) -> bool:
    return _resolved(path).is_relative_to(folder)


def _walk(top: Path, shown: str, found: Discovered, seen_files: set, excluder: _Excluder) -> None:
    seen_dirs: set[tuple[int, int]] = set()
    root = os.path.realpath(top)  # links inside may not lead out of it
    stack = [(str(top), shown)]
    while stack:
        directory, shown_dir = stack.pop()
        try:
            info = os.stat(directory)
        except OSError as exc:
            found.problems.append(Problem(shown_dir, f"cannot read directory: {exc.strerror or exc}"))
            continue
        key = (info.st_dev, info.st_ino)
        if key in seen_dirs:
            found.notes.append(f"{shown_dir}: skipped, a symbolic link back to a folder already searched")
            continue
        seen_dirs.add(key)
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            found.problems.append(Problem(shown_dir, f"cannot read directory: {exc.strerror or exc}"))
            continue
        subdirs = []
        for entry in entries:
            child_shown = f"{shown_dir.rstrip('/')}/{entry.name}" if shown_dir not in ("", ".") else entry.name
            try:
                is_dir = entry.is_dir()  # follows symlinks; loops are caught by seen_dirs
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    found.notes.append(f"{child_shown}: skipped, a symbolic link loop")
                continue
            if entry.is_symlink() and (is_dir or entry.name.endswith(SUFFIXES)) and not _inside(entry.path, root):
                found.notes.append(f"{child_shown}: skipped, a symbolic link to {os.path.realpath(entry.path)}, "
                                   f"outside {shown or '.'} (name it on the command line to lint it)")
                continue
            if is_dir:
                if not excluder.skips_dir(entry):
                    subdirs.append((entry.path, child_shown))
            elif entry.name.endswith(SUFFIXES) and not excluder.matches(entry):
                if entry.is_symlink() and not os.path.exists(entry.path):
                    found.problems.append(Problem(child_shown, "broken symbolic link"))
                else:
                    _add(Path(entry.path), child_shown, found, seen_files)
        stack.extend(reversed(subdirs))


def _inside(path: str, root: str) -> bool:
    target = os.path.realpath(path)
    return target == root or target.startswith(root.rstrip(os.sep) + os.sep)


def _add(path: Path, shown: str, found: Discovered, seen_files: set) -> None:
    try:
        info = path.stat()
    except OSError as exc:
        found.problems.append(Problem(shown, f"cannot read: {exc.strerror or exc}"))
        return
    key = (info.st_dev, info.st_ino)
    if key not in seen_files:
        seen_files.add(key)
        found.files.append((path, shown))
