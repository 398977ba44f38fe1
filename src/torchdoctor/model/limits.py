"""How long a measured run lasts: one set of defaults, one check, one command line.

Every way in (`torchdoctor run`, `watch()`, the callbacks, a rank, a `tune` or `memory` trial)
carries these three numbers; each dataclass that needs them derives from `Limits`, so a
default or a message never differs between them.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchdoctor.errors import UsageError

DEFAULT_WARMUP = 3  # optimizer steps run unmeasured first (compilation, caches, allocator)
DEFAULT_STEPS = 30  # optimizer steps measured after them
DEFAULT_MAX_SECONDS = 300.0  # the whole run's wall-clock limit, whatever the script does
# `run --follow` (the whole job): the script runs to its end; these stand for "no limit" (a
# --steps or --max-seconds given still holds)
FOLLOW_STEPS = 10**12
FOLLOW_MAX_SECONDS = 10 * 365 * 24 * 3600.0


@dataclass(kw_only=True)
class Limits:
    warmup: int = DEFAULT_WARMUP
    steps: int = DEFAULT_STEPS
    max_seconds: float = DEFAULT_MAX_SECONDS

    def check(self) -> None:
        """A one-line UsageError for a value no run can use."""
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise UsageError(f"steps must be a whole number of at least 1, not {self.steps!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise UsageError(f"warmup must be a whole number of at least 0, not {self.warmup!r}")
        if isinstance(self.max_seconds, bool) or not isinstance(self.max_seconds, (int, float)) \
                or not self.max_seconds > 0 or self.max_seconds == float("inf"):
            raise UsageError(f"max_seconds must be a positive number of seconds, not {self.max_seconds!r}")

    def limits(self) -> Limits:
        """These three numbers alone, to hand to the next stage."""
        return Limits(warmup=self.warmup, steps=self.steps, max_seconds=self.max_seconds)

    def argv(self) -> list[str]:
        """The same limits as `torchdoctor run` options, for a child process."""
        return ["--warmup", str(self.warmup), "--steps", str(self.steps), "--max-seconds", f"{self.max_seconds:g}"]
