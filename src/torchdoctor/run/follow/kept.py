"""A followed run's steps, bounded: a job of days runs millions of steps, and the record keeps the
first FIRST_STEPS (the start and its probe windows) and the last LAST_STEPS; `len()` still counts
every step, since the session numbers steps by it. The timeline (run/follow/timeline.py) keeps the
figures of every step, thinned when old.
"""

from __future__ import annotations

FIRST_STEPS = 2_000
LAST_STEPS = 20_000
TRIM_EVERY = 1_000  # steps dropped at a time: a del of a slice of pointers, tens of µs per thousand steps


class KeptSteps(list):
    """`session.steps` under --follow. The session appends; `trim` (the training thread, after a step)
    drops the middle once it holds LAST_STEPS + TRIM_EVERY more than the first FIRST_STEPS."""

    dropped = 0

    def __len__(self) -> int:
        return list.__len__(self) + self.dropped

    def trim(self, first: int = FIRST_STEPS, last: int = LAST_STEPS) -> int:
        held = list.__len__(self)
        if held < first + last + TRIM_EVERY:
            return 0
        cut = held - first - last
        del self[first:first + cut]
        self.dropped += cut
        return cut
