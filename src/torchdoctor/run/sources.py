"""Which user source files a run executed: the script plus modules imported during the run
that live outside Python's and the environment's own trees."""

from __future__ import annotations

import os
import re
import sys
import sysconfig

from torchdoctor.model.units import MIB

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
        if not os.path.isfile(path):  # a made-up __file__ (torch.ops says "_ops.py")
            continue
        if not path.startswith(roots) and "site-packages" not in path and path not in files:
            files.append(path)
    return files[:MAX_FILES]


MENTION_MAX_BYTES = 2 * MIB  # a generated or vendored file larger than this is not read for the mention


# A script that takes the GPU when there is one: it asks torch.cuda.is_available(), compares the
# device's type with "cuda", or defaults a device option to cuda. A mere mention is not enough:
# makemore's `--device` defaults to cpu and only says "cuda" to sync when asked for it.
PREFERS_CUDA = re.compile(rb"cuda\.is_available\(|\.type\s*==\s*['\"]cuda['\"]|default\s*=\s*['\"]cuda")


def prefer_cuda(files: list[str]) -> bool:
    """Whether the user's executed sources pick CUDA when it is there: a script written for a GPU,
    run here on a CPU."""
    for path in files:
        try:
            if os.path.getsize(path) > MENTION_MAX_BYTES:
                continue
            with open(path, "rb") as f:
                if PREFERS_CUDA.search(f.read()):
                    return True
        except OSError:
            continue
    return False
