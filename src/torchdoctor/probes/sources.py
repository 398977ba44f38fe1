"""Which user source files a run executed, and what the linter says about them.

Files are the script plus modules imported during the run that live outside Python's and
the environment's own trees; the linter reads them once, right after the run.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

from torchdoctor.record import StaticFinding

MAX_FILES = 200  # a run importing more user files than this is linted only in part


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")} | {sys.prefix, sys.base_prefix}
    roots.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # torchdoctor itself
    return tuple(os.path.abspath(r) + os.sep for r in roots if r)


def executed_user_files(script: str | None, modules_before: set[str]) -> list[str]:
    roots = _library_roots()
    files = [os.path.abspath(script)] if script and script.endswith(".py") and os.path.exists(script) else []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name in modules_before or not path or not path.endswith(".py"):
            continue
        path = os.path.abspath(path)
        if not path.startswith(roots) and "site-packages" not in path and path not in files:
            files.append(path)
    return files[:MAX_FILES]


def lint_executed(files: list[str]) -> list[StaticFinding]:
    from torchdoctor.lint.api import lint_files  # imported late: plain runs need no linter until here

    found = []
    for f in lint_files([Path(p) for p in files]):
        if f.location is None:
            continue
        path = f.location.path if os.path.isabs(f.location.path) else os.path.abspath(f.location.path)
        found.append(StaticFinding(f.code, f.slug, f.severity.value, path, f.location.line, f.message))
    return found
