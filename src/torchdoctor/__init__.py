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

__version__ = "0.1.0"

# name -> (module, attribute); attribute None: the module itself (torchdoctor.diagnose, the
# diagnose stage's package, is callable as the API's diagnose(): see diagnose/__init__.py)
_LAZY: dict[str, tuple[str, str | None]] = {
    "watch": ("torchdoctor.api", "watch"),
    "Watch": ("torchdoctor.api", "Watch"),
    "lint_source": ("torchdoctor.api", "lint_source"),
    "diagnose": ("torchdoctor.diagnose", None),
    "Report": ("torchdoctor.findings", "Report"),
    "Finding": ("torchdoctor.findings", "Finding"),
    "Severity": ("torchdoctor.findings", "Severity"),
    "TorchdoctorError": ("torchdoctor.errors", "TorchdoctorError"),
}

__all__ = ["__version__", *_LAZY]

if TYPE_CHECKING:
    # `X as X`: re-exported names, for type checkers and editors
    from torchdoctor.api import Watch as Watch, diagnose as diagnose, lint_source as lint_source, watch as watch
    from torchdoctor.errors import TorchdoctorError as TorchdoctorError
    from torchdoctor.findings import Finding as Finding, Report as Report, Severity as Severity


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'torchdoctor' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    loaded = importlib.import_module(module)
    value = loaded if attribute is None else getattr(loaded, attribute)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
