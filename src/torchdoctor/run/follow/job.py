"""Following a multi-rank job (`run --follow --nproc-per-node N`), in the launching process.

Each rank follows itself (run/follow/follower.py, in the rank's own process): its timeline
(RUN_DIR/rank-K/timeline.jsonl), its changes and windows, its live.json, its black box. This
process, which waits for torch.distributed.run's agent, reads the ranks' timelines as they grow
(`TimelineTail`: only the bytes appended since the last read; the whole file again after the
rank thinned and rewrote it) and

- tests them for a rank that becomes a straggler (rules/shifts.py's StragglerTest, fed step by
  step once every rank has written that step), for the panel and the exporters; the report finds
  the same from the ranks' records (diagnosis/ranks.py);
- hands each rank's new points to the exporters, labelled with the rank, and each rank's black box
  as soon as the rank wrote it (RUN_DIR/rank-K/blackbox.json: a crash, a signal, a stall), or a
  `lost` stop once a rank's process is gone without writing one, so a team's dashboard shows the stop
  while the job is still being torn down, not at its end;
- draws the live panel with one row per rank. The ranks' output reaches the terminal through this
  process then (torchrun's agent tees each rank's lines from files in RUN_DIR/logs, `JobOutput`),
  and every line erases the panel before it is written, so the panel never splits a line.

All of it runs in one thread of its own ("torchdoctor-job-follow"); nothing here touches a rank.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgspec

from torchdoctor.model.follow_record import STRAGGLER, BlackBox, ChangePoint, Level, TimelinePoint, rank_message
from torchdoctor.model.layout import BLACKBOX_FILE, CHANGES_FILE, TIMELINE_FILE
from torchdoctor.rules.shifts import StragglerTest, own_time

MAX_READ = 64 * 1024 * 1024  # bytes read from one timeline per tick at most
RECENT_POINTS = 5_000  # per rank, what this process keeps
PANEL_TICK_S = 0.5
LOG_DIR = "logs"  # RUN_DIR/logs: the ranks' output files, when the panel passes it through
LINE_PREFIX_ENV = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"


class TimelineTail:
    """A rank's timeline.jsonl (or changes.jsonl: `cls` ChangePoint), read incrementally."""

    def __init__(self, path: Path, cls: type = TimelinePoint) -> None:
        self.path, self.cls = path, cls
        self.offset = 0
        self.inode: int | None = None
        self.partial = b""
        self._decoder = msgspec.json.Decoder()

    def read(self) -> tuple[list[TimelinePoint], bool]:
        """(the points written since the last read, whether the file was rewritten: then they are all of it)."""
        from torchdoctor.model.serialize import SchemaError, from_plain

        try:
            st = os.stat(self.path)
        except OSError:
            return [], False
        rewritten = self.inode is not None and (st.st_ino != self.inode or st.st_size < self.offset)
        if rewritten:
            self.offset, self.partial = 0, b""
        self.inode = st.st_ino
        if st.st_size <= self.offset:
            return [], rewritten
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read(min(st.st_size - self.offset, MAX_READ))
        except OSError:
            return [], rewritten
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        points = []
        for line in lines:
            try:
                points.append(from_plain(self.cls, self._decoder.decode(line)))
            except (msgspec.DecodeError, SchemaError):
                continue
        return points, rewritten


class JobWatch:
    def __init__(self, run_dir: Path, ranks: list[int], options) -> None:
        self.run_dir, self.ranks, self.options = run_dir, ranks, options
        self.sinks: list = list(options.sinks)
        self.panel = options.panel
        self.tails = {r: TimelineTail(run_dir / f"rank-{r}" / TIMELINE_FILE) for r in ranks}
        self.change_tails = {r: TimelineTail(run_dir / f"rank-{r}" / CHANGES_FILE, ChangePoint) for r in ranks}
        self.points: dict[int, list[TimelinePoint]] = {r: [] for r in ranks}
        self.changes: list[ChangePoint] = []
        self.boxes: dict[int, BlackBox] = {}  # the ranks' black boxes, as each wrote it (sent to the exporters)
        self.errors: list[str] = []
        self.output = JobOutput(run_dir / LOG_DIR, self.panel) if self.panel is not None else None
        self._test = StragglerTest()
        self._waiting: dict[int, dict[int, TimelinePoint]] = {r: {} for r in ranks}  # not yet fed to the test
        self._next_step = 0
        self._unsent: dict[int, list[TimelinePoint]] = {r: [] for r in ranks}
        self._unreadable: set[int] = set()  # ranks whose blackbox.json was not a black box
        self._last_send = time.monotonic()
        self._started = time.monotonic()
        self._started_epoch = time.time()  # the ranks' heartbeats say when in epoch seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="torchdoctor-job-follow", daemon=True)

    def __enter__(self) -> "JobWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            self.tick(final=True)
        except Exception as err:  # the job's record is written whatever this does
            self.errors.append(f"{type(err).__name__}: {err}")
        if self.panel is not None:
            self.panel.close()

    def _run(self) -> None:
        tick = PANEL_TICK_S if self.panel is not None else max(1.0, self.options.every_s / 2)
        while not self._stop.wait(tick):
            try:
                self.tick()
            except Exception as err:  # never let the watch's failure reach the job
                self.errors.append(f"{type(err).__name__}: {err}")
                if len(self.errors) > 20:
                    return

    def tick(self, final: bool = False) -> None:
        for rank, tail in self.tails.items():
            new, rewritten = tail.read()
            if rewritten:
                self.points[rank] = []
            self.points[rank].extend(new)
            if len(self.points[rank]) > 2 * RECENT_POINTS:
                del self.points[rank][:-RECENT_POINTS]
            for p in new:
                if p.step >= self._next_step:
                    self._waiting[rank][p.step] = p
                if not rewritten:
                    self._unsent[rank].append(p)
        for rank, tail in self.change_tails.items():  # each rank's own changes, as its follower found them
            new_changes, rewritten = tail.read()
            for change in new_changes if not rewritten else []:
                change.rank = rank if change.rank is None else change.rank
                self.changes.append(change)
                self._call_sinks("on_change", change)
        self._feed()
        self._read_boxes()
        self._find_lost()
        if final or time.monotonic() - self._last_send >= self.options.every_s:
            self._last_send = time.monotonic()
            for rank, points in self._unsent.items():
                if points:
                    self._call_sinks("on_points", points[-10_000:], rank=rank)
            self._unsent = {r: [] for r in self.ranks}
        if self.panel is not None and not final:
            self.panel.show(self.state())

    def _feed(self) -> None:
        """Steps every rank has written, in order, to the straggler test."""
        if len(self.ranks) < 2:
            return
        first = self._waiting[self.ranks[0]]
        for step in sorted(s for s in first if s >= self._next_step):
            row = {r: self._waiting[r].get(step) for r in self.ranks}
            if any(p is None for p in row.values()):
                break
            self._next_step = step + 1
            if any(p.warmup or p.sampled for p in row.values()) or len({p.comm_wait_s is None for p in row.values()}) > 1:
                continue
            found = self._test.add(step, {r: own_time(p.step_s, p.comm_wait_s) for r, p in row.items()},
                 step_s=max(p.step_s for p in row.values()))
            if found is not None:
                point = row[found.rank]
                shift = found.shift
                change = ChangePoint(kind=STRAGGLER, rank=found.rank, step=found.step, t=point.t,
                                     detected_step=found.detected,
                                     before=Level(shift.before_median, shift.before_spread, shift.before_n),
                                     after=Level(shift.after_median, shift.after_spread, shift.after_n),
                                     threshold=shift.threshold)
                self.changes.append(change)
                self._call_sinks("on_change", change)
        for waiting in self._waiting.values():
            for step in [s for s in waiting if s < self._next_step]:
                del waiting[step]

    def state(self) -> dict:
        rows = []
        for rank in self.ranks:
            points = self.points[rank][-200:]
            clean = [p for p in points if not p.sampled and not p.warmup] or points
            if not clean:
                rows.append({"rank": rank, "step": 0})
                continue
            comm = [p.comm_wait_s for p in clean if p.comm_wait_s is not None]
            # the rank's own GPU (its device, as its NVML sampler saw it last); absent: not measurable
            gpu = next((p for p in reversed(points)
                        if p.gpu_util is not None or p.gpu_power_w is not None or p.gpu_mem_bytes is not None), None)
            rates = [p.samples / p.step_s for p in clean if p.samples and p.step_s > 0]
            rows.append({"rank": rank, "step": points[-1].step, "t": points[-1].t,
                         "step_ms": statistics.median(p.step_s for p in clean) * 1000,
                         "wait_ms": statistics.median(p.data_wait_s for p in clean) * 1000,
                         "comm_ms": statistics.median(comm) * 1000 if comm else None,
                         "samples_s": statistics.median(rates) if rates else None,
                         "mem": max((p.mem_bytes for p in points if p.mem_bytes), default=None),
                         "gpu_util": gpu.gpu_util if gpu else None, "gpu_power_w": gpu.gpu_power_w if gpu else None,
                         "gpu_mem": gpu.gpu_mem_bytes if gpu else None})
        last = self.changes[-1] if self.changes else None
        if last is None:
            latest = None
        elif last.kind == STRAGGLER:
            latest = f"rank {last.rank} became the straggler at step {last.step}"
        else:
            latest = f"rank {last.rank}: {last.kind} changed at step {last.step}"
        stopped = [rank_message(box.message, r) for r, box in sorted(self.boxes.items(), key=lambda kv: kv[1].t)]
        return {"ranks": rows, "t": time.monotonic() - self._started, "changes": len(self.changes),
                "last_change": latest, "stopped": stopped[0] if stopped else None}

    def _read_boxes(self) -> None:
        """A rank's black box once it is written (one stat a rank a tick until then), to the exporters."""
        from torchdoctor.errors import InputError
        from torchdoctor.model.serialize import SchemaError
        from torchdoctor.run.follow.blackbox import read_box

        for rank in self.ranks:
            if rank in self.boxes or rank in self._unreadable:
                continue
            path = self.run_dir / f"rank-{rank}" / BLACKBOX_FILE
            if not path.exists():
                continue
            try:
                box = read_box(path)
            except (SchemaError, InputError) as err:  # said once; the merged record's box goes out at the end
                self._unreadable.add(rank)
                self.errors.append(f"rank {rank}'s black box: {err}")
                continue
            box.rank = rank
            self.boxes[rank] = box
            self._call_sinks("on_blackbox", box, rank=rank)

    def _find_lost(self) -> None:
        """A rank whose process is gone without a record or a black box (SIGKILL, the out-of-memory killer):
        a `lost` stop to the exporters at once, with what its last heartbeat said (its steps, its line). The
        merged record lists it lost at the end, as before."""
        from torchdoctor.model.layout import RECORD_FILE
        from torchdoctor.run.ranks.heartbeat import read_heartbeats

        waiting = [r for r in self.ranks if r not in self.boxes]
        if not waiting:
            return
        beats = read_heartbeats(self.run_dir)
        for rank in waiting:
            beat, rank_dir = beats.get(rank), self.run_dir / f"rank-{rank}"
            pid, steps = (beat or {}).get("pid"), (beat or {}).get("steps")
            if not isinstance(pid, int) or not isinstance(steps, int) or steps < 0 or _alive(pid) \
                    or (rank_dir / RECORD_FILE).exists() or (rank_dir / BLACKBOX_FILE).exists():
                continue
            seen = f", last seen at {beat['position']}" if beat.get("position") else ""
            when = beat.get("t")
            box = BlackBox(reason=LOST, step=steps, rank=rank,
                           t=max(0.0, when - self._started_epoch) if isinstance(when, (int, float)) else 0.0,
                           message=f"the rank's process {pid} ended without writing its record or black box after "
                                   f"step {steps}{seen} (killed: SIGKILL, the out-of-memory killer)")
            self.boxes[rank] = box
            self._call_sinks("on_blackbox", box, rank=rank)

    def blackboxes(self, record) -> None:
        """The ranks' black boxes the exporters have not had yet (a rank whose blackbox.json could not be
        read), from the merged record, each labelled with its rank."""
        for view in getattr(record, "ranks", []):
            if view.blackbox is not None and view.rank not in self.boxes:
                self.boxes[view.rank] = view.blackbox
                self._call_sinks("on_blackbox", view.blackbox, rank=view.rank)

    def _call_sinks(self, method: str, *args, **kwargs) -> None:
        for sink in self.sinks:
            handler = getattr(sink, method, None)
            if handler is None:
                continue
            try:
                handler(*args, **kwargs)
            except Exception as err:  # an exporter's failure is said, never raised into the launch
                self.errors.append(f"{type(sink).__name__}.{method}: {type(err).__name__}: {err}")


LOST = "lost"  # a stop's reason: the rank's process ended without writing anything (exporters' label)


def _alive(pid: int) -> bool:
    """The process runs (a zombie does not: it ended, its parent has not reaped it). Where /proc cannot
    say (not Linux), it is taken as running: no rank is called lost on a guess."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return not Path("/proc/self/stat").exists()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


class JobOutput:
    """While the ranks run: their output is teed by torchrun's agent (`--tee 3 --log-dir RUN_DIR/logs`)
    to this process's sys.stdout and sys.stderr, which pass every write through the panel (erased first,
    drawn again on its next tick). Each rank's line starts with `[rankK]:` (torchrun's prefix, unless
    TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE is set)."""

    def __init__(self, log_dir: Path, panel) -> None:
        self.log_dir, self.panel = log_dir, panel
        self._saved: tuple[Any, Any] | None = None
        self._prefix_set = False

    def __enter__(self) -> "JobOutput":
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if LINE_PREFIX_ENV not in os.environ:
            os.environ[LINE_PREFIX_ENV] = "[rank${rank}]:"
            self._prefix_set = True
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout, sys.stderr = _PassThrough(sys.stdout, self.panel), _PassThrough(sys.stderr, self.panel)
        return self

    def __exit__(self, *exc) -> None:
        if self._saved is not None:
            sys.stdout, sys.stderr = self._saved
        if self._prefix_set:
            os.environ.pop(LINE_PREFIX_ENV, None)


class _PassThrough:
    def __init__(self, stream, panel) -> None:
        self._stream, self._panel = stream, panel

    def write(self, text: str) -> int:
        self._panel.write_through(self._stream, text)
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
