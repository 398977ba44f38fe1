"""Check the script or module a run or tune is pointed at, before anything runs.

Torch-free on purpose: `tune` checks its target in a parent process that never trains."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from torchdoctor.errors import UsageError


def check_target(target: str, module: bool) -> str:
    """Validate the script (or, with `module`, the module name); returns its display name."""
    if module:
        sys.path.insert(0, os.getcwd())  # as `python -m` will have it when the module runs
        try:
            spec = importlib.util.find_spec(target)
        except (ImportError, ValueError) as exc:
            spec, reason = None, str(exc)
        else:
            reason = "no such module"
        finally:
            sys.path.remove(os.getcwd())
        if spec is None:
            raise UsageError(
                f"cannot find module '{target}' ({reason}); run from the directory "
                "that contains it or install it, as `python -m` would need"
            )
        return f"-m {target}"
    path = Path(target)
    if not path.exists():
        raise UsageError(f"script not found: {target}; pass the path to your training script")
    if path.is_dir():
        raise UsageError(f"{target} is a directory; pass the training script inside it")
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise UsageError(f"cannot read {target} ({exc.strerror}); check its permissions") from None
    return target
