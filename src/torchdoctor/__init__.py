"""torchdoctor: tells a PyTorch user why their training is slow, with measured evidence.

The Python API (see `torchdoctor.api`), loaded on first use: `import torchdoctor` alone loads
no torch, so the command line's `--help`, `rules` and `lint` stay fast.

    torchdoctor.watch(steps=30, warmup=3, out=DIR)   # `with ... as doc:` around a loop or a cell
    torchdoctor.diagnose(RUN_DIR)                    # the Report of a run directory
    torchdoctor.lint_source(text, path="train.py")   # lint findings of source text
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from torchdoctor.version import __version__

# name -> (module, attribute). The one deliberate upward import of the floors (the package root
# reaching the API): lazy, so `import torchdoctor` or any submodule loads no torch.
_LAZY: dict[str, tuple[str, str]] = {
    "watch": ("torchdoctor.api", "watch"),
    "Watch": ("torchdoctor.api", "Watch"),
    "lint_source": ("torchdoctor.api", "lint_source"),
    "diagnose": ("torchdoctor.api", "diagnose"),
    "Report": ("torchdoctor.model.findings", "Report"),
    "Finding": ("torchdoctor.model.findings", "Finding"),
    "Severity": ("torchdoctor.model.findings", "Severity"),
    "TorchdoctorError": ("torchdoctor.errors", "TorchdoctorError"),
}

__all__ = ["__version__", *_LAZY]

if TYPE_CHECKING:
    # `X as X`: re-exported names, for type checkers and editors
    from torchdoctor.api import Watch as Watch, diagnose as diagnose, lint_source as lint_source, watch as watch
    from torchdoctor.errors import TorchdoctorError as TorchdoctorError
    from torchdoctor.model.findings import Finding as Finding, Report as Report, Severity as Severity


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'torchdoctor' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    loaded = importlib.import_module(module)
    value = getattr(loaded, attribute)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
