"""Each rank says, once a second, how far it got and where its training thread is; the
launching `torchdoctor run` reads that to tell a hung rank from the ranks waiting for it.

The rank side is a small thread writing RUN_DIR/rank-K/heartbeat.json (steps done, the time,
the training thread's innermost frame and the user line around it). The launcher side,
`StallWatch`, calls `on_stall` when no rank has finished a step for the stall timeout (or ten
of its slowest steps, if longer), naming the rank the others wait for: the one with the fewest
steps, and among those the one that is not waiting inside a collective or backward. The
launcher then stops every rank through torch's own elastic agent (launch.py).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

HEARTBEAT_FILE = "heartbeat.json"
INTERVAL_S = 1.0
SLOW_STEP_FACTOR = 10  # a stall is also ten of the slowest steps seen without progress
# Frames inside these mean the thread waits for the other ranks (a collective, or a backward
# whose DDP all-reduce waits for them).
WAITING_MARKERS = (os.path.join("torch", "distributed"), os.path.join("torch", "autograd"),
                   os.path.join("torch", "nn", "parallel"))


class HeartbeatWriter:
    def __init__(self, rank_dir: Path, rank: int, clock=time.time) -> None:
        self.path = rank_dir / HEARTBEAT_FILE
        self.rank = rank
        self.clock = clock
        self.session = None  # set once the run's session exists
        self.thread_id = threading.get_ident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="torchdoctor-heartbeat", daemon=True)
        self._slowest = 0.0

    def start(self) -> None:
        self.write("starting")
        self._thread.start()

    def stop(self, state: str = "done") -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.write(state)

    def _beat(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            self.write("running")

    def write(self, state: str) -> None:
        session = self.session
        steps = session.step_count if session is not None else 0
        if session is not None and session.step_count:
            self._slowest = max(self._slowest, session.steps[-1].duration_s)
        where, waiting = main_thread_position(self.thread_id)
        doc = {"rank": self.rank, "pid": os.getpid(), "state": state, "steps": steps, "t": self.clock(),
               "slowest_step_s": round(self._slowest, 4), "position": where, "waiting": waiting}
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(doc), encoding="utf-8")
            tmp.replace(self.path)
        except OSError:  # the run directory vanished: nothing to report to
            pass


def main_thread_position(thread_id: int) -> tuple[str | None, bool]:
    """The user line the thread is on (`train.py:42 in train_step`), and whether it is
    inside torch's distributed or autograd code (waiting for the other ranks)."""
    from torchdoctor.run.probes.frames import USER, classify_file, display_path, frame_line  # imports torch: only in ranks

    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return None, False
    waiting = any(marker in frame.f_code.co_filename for marker in WAITING_MARKERS)
    innermost = frame.f_code.co_name
    while frame is not None and classify_file(frame.f_code.co_filename) != USER:
        waiting = waiting or any(marker in frame.f_code.co_filename for marker in WAITING_MARKERS)
        frame = frame.f_back
    if frame is None:
        return None, waiting
    code = frame.f_code
    where = f"{display_path(code.co_filename)}:{frame_line(frame)} in {getattr(code, 'co_qualname', code.co_name)}"
    if innermost != code.co_name:
        where += f" (inside {innermost})"
    return where, waiting


MAX_POSITION_CHARS = 300


def read_heartbeats(ranks_dir: Path) -> dict[int, dict]:
    """Each rank's last heartbeat, by rank: a damaged or hostile file is skipped, and only its
    plain fields are kept (a rank number, a short position text)."""
    from torchdoctor.model.serialize import SchemaError, decode_untrusted

    beats = {}
    for path in ranks_dir.glob(f"rank-*/{HEARTBEAT_FILE}"):
        try:
            doc = decode_untrusted(path)
            rank = doc["rank"]
        except (SchemaError, KeyError, TypeError):
            continue
        position = doc.get("position")
        if isinstance(rank, int) and not isinstance(rank, bool) and isinstance(position, (str, type(None))):
            doc["position"] = position[:MAX_POSITION_CHARS] if position else position  # a line, in a table cell
            beats[rank] = doc
    return beats


@dataclass
class Stall:
    rank: int | None  # the rank the others wait for, when one can be told
    message: str


class StallWatch:
    """In the launcher: stop the job when its ranks stop making progress."""

    def __init__(self, ranks_dir: Path, ranks: list[int], stall_s: float,
                 on_stall: Callable[[Stall], None] | None = None, clock=time.time, interval_s: float = INTERVAL_S):
        self.ranks_dir = ranks_dir
        self.ranks = ranks
        self.stall_s = stall_s
        self.on_stall = on_stall
        self.clock = clock
        self.interval_s = interval_s
        self.stall: Stall | None = None
        self._progress: dict[int, tuple[int, float]] = {}  # rank -> (steps, when they last grew)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="torchdoctor-stall-watch", daemon=True)

    def __enter__(self) -> "StallWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            stall = self.check(read_heartbeats(self.ranks_dir))
            if stall is not None:
                self.stall = stall
                if self.on_stall is not None:
                    self.on_stall(stall)
                return

    def check(self, beats: dict[int, dict]) -> Stall | None:
        now = self.clock()
        running = {r: b for r, b in beats.items() if b.get("state") in ("starting", "running")}
        for rank, beat in beats.items():
            steps = int(beat.get("steps", 0))
            last = self._progress.get(rank)
            if last is None or steps > last[0]:
                self._progress[rank] = (steps, now)
        if not running or not any(steps for steps, _ in self._progress.values()):
            return None  # before the first step, each rank's own --max-seconds bounds it
        limit = max(self.stall_s, SLOW_STEP_FACTOR * max(float(b.get("slowest_step_s", 0)) for b in beats.values()))
        latest = max(when for _, when in self._progress.values())
        if now - latest < limit:
            return None
        return describe_stall(beats, now - latest, self.ranks)


def describe_stall(beats: dict[int, dict], idle_s: float, expected: list[int]) -> Stall:
    missing = [r for r in expected if r not in beats]
    if missing:
        return Stall(missing[0], f"rank {missing[0]} never reported (it did not start, or died at once); "
                                 f"the others made no progress for {idle_s:.0f} s")
    fewest = min(int(b.get("steps", 0)) for b in beats.values())
    behind = sorted(r for r, b in beats.items() if int(b.get("steps", 0)) == fewest)
    not_waiting = [r for r in behind if not beats[r].get("waiting")]
    suspect = behind[0] if len(behind) == 1 else not_waiting[0] if len(not_waiting) == 1 else None
    parts = []
    if suspect is not None:
        beat = beats[suspect]
        parts.append(f"rank {suspect} made no progress for {idle_s:.0f} s (after {beat.get('steps', 0)} steps; last "
                     f"seen at {beat.get('position') or 'an unknown line'})")
    else:
        parts.append(f"no rank made progress for {idle_s:.0f} s, and every rank waits inside a collective or "
                     "backward: the ranks called different collectives, or in a different order")
    others = [r for r in sorted(beats) if r != suspect]
    if others:
        waits = "; ".join(f"rank {r} at {beats[r].get('position') or 'an unknown line'}"
                          + (" waiting for the others" if beats[r].get("waiting") else "") for r in others)
        parts.append(waits)
    return Stall(suspect, "; ".join(parts))
