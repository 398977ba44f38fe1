"""The live panel of a followed run (`run --follow` on a terminal): a few lines on stderr, drawn
with rich, redrawn in place at most every REDRAW_S.

It shows the run's figures and, from the record so far, the current top findings (those `torchdoctor
report DIR` would rank first now). It never mixes with the script's output: it is drawn only from the
training thread, right after a step closes (never in the middle of the script's own write), and erased
whenever the script is about to print or log (the session's on_output event), to be drawn again below
the script's lines after the next step. The follower's thread only hands it the figures. It is off where stderr is not a
terminal (pipes, files), under CI (the CI variable), with TERM=dumb, and with --no-live.
"""

from __future__ import annotations

import io
import os
import statistics
import threading
import time
from typing import TextIO

REDRAW_S = 0.5
ERASE_UP = "\x1b[{n}F\x1b[J"  # to the start of the line n lines up, then clear to the end of the screen


class LivePanel:
    def __init__(self, stream: TextIO, width: int = 100) -> None:
        self.stream = stream
        self.width = width
        self._lines = 0  # lines of the panel on screen now
        self._state: dict | None = None
        self._last_draw = 0.0
        self._closed = False
        self._lock = threading.Lock()

    @classmethod
    def for_terminal(cls, stream: TextIO, force: bool = False) -> "LivePanel | None":
        """A panel when `stream` is a terminal and not CI's (or `force`: --live); else None."""
        try:
            tty = stream.isatty()
        except (AttributeError, ValueError, OSError):
            tty = False
        if not force and (not tty or os.environ.get("CI") or os.environ.get("TERM") == "dumb"):
            return None
        if not tty:
            return None  # --live into a pipe would write escape codes into a log
        try:
            width = min(os.get_terminal_size(stream.fileno()).columns, 120)
        except (OSError, ValueError, AttributeError):
            width = 100
        return cls(stream, width=max(40, width))

    # ---- from the follower's thread ----------------------------------------------------------
    def update(self, follower) -> None:
        points = follower.timeline.points[-200:]
        clean = [p for p in points if not p.sampled and not p.warmup] or points
        if not clean:
            return
        step = statistics.median(p.step_s for p in clean)
        wait = statistics.median(p.data_wait_s for p in clean)
        rates = [p.samples / p.step_s for p in clean if p.samples and p.step_s > 0]
        mem = max((p.mem_bytes for p in points if p.mem_bytes), default=None)
        changes = follower.record.changes
        last = changes[-1] if changes else None
        self._state = {"steps": follower.record.steps, "t": points[-1].t, "step_ms": step * 1000,
                       "wait_ms": wait * 1000, "samples_s": statistics.median(rates) if rates else None,
                       "mem": mem, "changes": len(changes),
                       "last_change": f"{last.kind} changed at step {last.step}" if last else None,
                       "windows": len(follower.record.windows), "gpu": _gpu_line(follower.probes),
                       "top": list(getattr(follower, "top_findings", []))}

    # ---- session events (the training thread) ----------------------------------------------------
    def on_step(self, sample) -> None:
        if self._closed or self._state is None:
            return
        now = time.monotonic()
        if now - self._last_draw < REDRAW_S:
            return
        self._last_draw = now
        with self._lock:
            self._write(self._erase() + self.render(self._state))

    def show(self, state: dict) -> None:
        """A multi-rank job's panel (run/follow/job.py): drawn from the launcher's own thread, where the
        ranks' lines arrive through `write_through`."""
        self._state = state
        now = time.monotonic()
        if self._closed or now - self._last_draw < REDRAW_S:
            return
        self._last_draw = now
        with self._lock:
            self._write(self._erase() + self.render(state))

    def write_through(self, stream, text: str) -> None:
        """Another writer's text (a rank's line), with the panel erased first."""
        with self._lock:
            if self._lines and not self._closed:
                erase = self._erase()
                try:
                    self.stream.write(erase)
                    self.stream.flush()
                except (OSError, ValueError):
                    self._closed = True
            stream.write(text)
            stream.flush()

    def on_output(self) -> None:
        """The script is about to print: the panel goes, so its line starts on a clean line."""
        if self._lines and not self._closed:
            with self._lock:
                self._write(self._erase())

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._write(self._erase())

    # ---- drawing -----------------------------------------------------------------------------
    def render(self, state: dict) -> str:
        from rich.table import Table

        from torchdoctor.model.units import format_bytes

        if "ranks" in state:
            return self._finish(self._job_table(state), "torchdoctor --follow · ranks")
        table = Table.grid(padding=(0, 2))
        for _ in range(4):
            table.add_column()
        table.add_row("step", f"{state['steps']:,}", "time", f"{state['t']:.0f} s")
        table.add_row("step time", f"{state['step_ms']:.2f} ms", "data wait", f"{state['wait_ms']:.2f} ms")
        table.add_row("samples/s", f"{state['samples_s']:,.0f}" if state["samples_s"] else "—",
                      "memory (high-water)", format_bytes(state["mem"]) if state["mem"] else "—")
        table.add_row("changes", str(state["changes"]), "probe windows", str(state["windows"]))
        if state.get("gpu"):
            table.add_row("GPU", state["gpu"], "", "")
        if state["last_change"]:
            table.add_row("latest", state["last_change"], "", "")
        return self._finish(table, "torchdoctor --follow", state.get("top") or [])

    def _job_table(self, state: dict):
        from rich.table import Table

        from torchdoctor.model.units import format_bytes

        table = Table(box=None, padding=(0, 1), show_edge=False)
        # GPU: the rank's own device as its NVML sampler saw it (utilization, power, memory used on it)
        for name in ("rank", "step", "step time", "data wait", "in collectives", "samples/s", "memory", "GPU"):
            # the GPU's cell folds onto a second line on a narrow terminal: the figures never cut
            table.add_column(name, justify="right" if name not in ("rank", "GPU") else "left", no_wrap=name != "GPU",
                             min_width=len(NOT_MEASURABLE) if name == "GPU" else len(name))
        for row in state["ranks"]:
            if not row.get("step"):
                table.add_row(str(row["rank"]), "—", "", "", "", "", "", "")
                continue
            gpu = gpu_text(row.get("gpu_util"), row.get("gpu_power_w"), row.get("gpu_mem"), named=False)
            table.add_row(str(row["rank"]), f"{row['step']:,}", f"{row['step_ms']:.2f} ms", f"{row['wait_ms']:.2f} ms",
                          f"{row['comm_ms']:.2f} ms" if row.get("comm_ms") is not None else "—",
                          f"{row['samples_s']:,.0f}" if row.get("samples_s") else "—",
                          format_bytes(row["mem"]) if row.get("mem") else "—", gpu or NOT_MEASURABLE)
        captions = [f"latest: {state['last_change']}"] if state.get("last_change") else []
        if state.get("stopped"):  # the first rank's black box: it stopped (crash, signal, stall)
            captions.append(f"stopped: {state['stopped']}")
        if captions:
            table.caption = "\n".join(captions)
        return table

    def _finish(self, table, title: str, top: list[str] = ()) -> str:
        """The panel's text; `top`: the current top findings, a line each below the figures (cut, never
        folded, at the panel's width)."""
        from rich.console import Console, Group
        from rich.panel import Panel
        from rich.text import Text

        buffer = io.StringIO()
        console = Console(file=buffer, width=self.width, force_terminal=True, color_system="standard",
                          emoji=False, highlight=False)
        body = table
        if top:
            lines = [Text(f"top findings so far ({len(top)}):", style="bold")]
            lines += [Text(f"  {i}. {finding}", no_wrap=True, overflow="ellipsis") for i, finding in enumerate(top, 1)]
            body = Group(table, *lines)
        console.print(Panel(body, title=title, title_align="left", expand=False))
        text = buffer.getvalue()
        self._lines = text.count("\n")
        return text

    def _erase(self) -> str:
        n, self._lines = self._lines, 0
        return ERASE_UP.format(n=n) if n else ""

    def _write(self, text: str) -> None:
        if not text:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self._closed = True


NOT_MEASURABLE = "not measurable"  # a rank's GPU cell where NVML gave no figure (no CUDA, no NVML): never a number


def _gpu_line(probes) -> str | None:
    """The GPU's latest NVML sample, when the run uses CUDA and NVML answers (run/probes/nvml.py)."""
    gpu = getattr(probes, "gpu", None)
    s = gpu.latest_sample() if gpu is not None and hasattr(gpu, "latest_sample") else None
    if s is None:
        return None
    return gpu_text(s.gpu_util, s.power_w, s.mem_used_bytes, s.power_limit_w, s.mem_total_bytes)


def gpu_text(util: float | None, power_w: float | None, mem_bytes: int | None, power_limit_w: float | None = None,
             mem_total_bytes: int | None = None, named: bool = True) -> str | None:
    """NVML's figures as the panel shows them: the run's line (`named`), or a rank's cell (`97% · 310W ·
    41.0GiB`, narrow enough for a row of a 100-column terminal); None when it has none."""
    parts = []
    if util is not None:
        parts.append(f"util {util:.0f}%" if named else f"{util:.0f}%")
    if power_w is not None:
        watts = " W" if named else "W"
        power = f"{power_w:.0f}" + (f"/{power_limit_w:.0f}{watts}" if power_limit_w else watts)
        parts.append(f"power {power}" if named else power)
    if mem_bytes is not None:
        unit = " GiB" if named else "GiB"  # a cell folds between figures, never inside one
        memory = f"{mem_bytes / 2**30:.1f}" + (f"/{mem_total_bytes / 2**30:.1f}{unit}" if mem_total_bytes else unit)
        parts.append(f"memory {memory}" if named else memory)
    return " · ".join(parts) or None
