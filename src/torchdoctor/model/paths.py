"""Paths in one rule: the path as the user types it, and the absolute path of a path a record
holds. A finding's path is kept as typed from the probe to the HTML card; where a file must be
opened or two paths compared, it is made absolute against the run's working directory."""

from __future__ import annotations

import os
from functools import lru_cache

INSTALLED_MARKERS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def typed_path(path: str, cwd: str | None = None) -> str:
    """As the user would type it: relative to the working directory when inside it, else absolute."""
    cwd = cwd or os.getcwd()
    full = os.path.normpath(os.path.join(cwd, path))
    try:
        rel = os.path.relpath(full, cwd)
    except ValueError:  # another drive (Windows)
        return full
    return full if rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


def recorded_path(path: str, cwd: str) -> str:
    """The absolute path of a path a record holds (a relative one is relative to the run's cwd)."""
    return os.path.normpath(os.path.join(cwd, path))


@lru_cache(maxsize=4096)
def library_of(filename: str) -> str | None:
    """The installed package a file belongs to (`lightning`, `transformers`), or None for the
    user's own files. Installed means under a site-packages or dist-packages folder, or in a
    folder where pip installed packages (`pip install --target DIR`: DIR holds *.dist-info)."""
    for marker in INSTALLED_MARKERS:
        at = filename.rfind(marker)
        if at >= 0:
            rest = filename[at + len(marker):]
            top = rest.split(os.sep, 1)[0]
            return top[:-3] if top.endswith(".py") else top
    parent, child = os.path.dirname(filename), os.path.basename(filename)
    while parent and parent != os.path.dirname(parent):
        if _holds_installed_packages(parent):
            return child[:-3] if child.endswith(".py") else child
        parent, child = os.path.dirname(parent), os.path.basename(parent)
    return None


@lru_cache(maxsize=1024)
def _holds_installed_packages(folder: str) -> bool:
    try:
        return any(name.endswith(".dist-info") for name in os.listdir(folder))
    except OSError:
        return False
