"""Backward attribution: how long the backward of one source line's ops takes.

The op sampler finds lines that issue many tiny ops; their forward time is measured by the
line sampler, but their backward runs inside `loss.backward()` and is invisible to both.
In a window step after the sampled ones, a light TorchFunctionMode tags the autograd nodes
created by those lines, and node hooks time each node's backward. Only the forward pays
for the mode, so the backward timings are not inflated by it.
"""

from __future__ import annotations

import functools
import sys
from collections import defaultdict
from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from torchdoctor.run.probes.frames import display_path, frame_line, user_frame
from torchdoctor.model.record import RunRecord
from torchdoctor.run.process import current_pid


class _NodeTagger(TorchFunctionMode):
    torchdoctor_probe_mode = True  # lifted off the mode stack inside compiled code (probes/compile.py)

    def __init__(self, timer: "BackwardTimer") -> None:
        super().__init__()
        self.timer = timer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        timer = self.timer
        if current_pid() == timer.pid and torch.is_grad_enabled():
            name = getattr(func, "__name__", "")
            in_place = name.endswith("_") or name == "__setitem__"
            values = (out, args[0] if in_place and args else None)
            # Only a new autograd node is tagged: the walk to the user's line is left out for the
            # calls that made none (a DataLoader's every sample, a `.item()`)
            if _new_nodes(timer, values):
                user, _ = user_frame(sys._getframe(1))
                if user is not None:
                    key = (user.f_code.co_filename, frame_line(user))
                    if key in timer.candidates:
                        timer.tag(key, *values)
        return out


def _nodes(values):
    """The autograd nodes of the tensors among `values` (each a tensor, a tuple or list of them, or None)."""
    for value in values:
        for tensor in value if isinstance(value, (tuple, list)) else (value,):
            node = getattr(tensor, "grad_fn", None) if isinstance(tensor, torch.Tensor) else None
            if node is not None:
                yield node


def _new_nodes(timer: "BackwardTimer", values) -> bool:
    """Whether `tag` would tag a node of `values`: one not tagged yet."""
    return any(id(node) not in timer._tagged for node in _nodes(values))


class BackwardTimer:
    name = "backward-attribution"

    def __init__(self, clock: Callable[[], float], candidates: Callable[[], set[tuple[str, int]]],
                 on_activate: Callable[[], None] = lambda: None) -> None:
        self.clock = clock
        self.find_candidates = candidates
        self.on_activate = on_activate
        self.pid = current_pid()
        self.candidates: set[tuple[str, int]] = set()
        self.windows = 0
        self.seconds: dict[tuple[str, int], float] = defaultdict(float)
        self.nodes: dict[tuple[str, int], int] = defaultdict(int)
        self._tagged: dict[int, object] = {}  # id -> node, kept alive so ids are not reused
        self._started: dict[int, float] = {}
        self._mode: _NodeTagger | None = None

    @property
    def active(self) -> bool:
        return self._mode is not None

    def activate(self, phase: str) -> None:
        if self._mode is not None:
            self.windows += 1
            return
        self.candidates = self.find_candidates()
        if not self.candidates:
            return
        self.windows += 1
        self._mode = _NodeTagger(self)
        self._mode.__enter__()
        self.on_activate()

    def can_stop_now(self) -> bool:
        """Its function mode on top of the stack (a user's own mode entered later leaves first)."""
        top = torch._C._len_torch_function_stack()
        return self._mode is not None and top > 0 and torch._C._get_function_stack_at(top - 1) is self._mode

    def deactivate(self) -> None:
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        self._tagged.clear()
        self._started.clear()

    def install(self) -> None:
        pass  # the session's schedule activates the window

    def uninstall(self) -> None:
        self.deactivate()

    def tag(self, key: tuple[str, int], *values) -> None:
        for node in _nodes(values):
            if id(node) in self._tagged:
                continue
            self._tagged[id(node)] = node
            node.register_prehook(functools.partial(self._before, id(node)))
            node.register_hook(functools.partial(self._after, key, id(node)))

    def _before(self, node_id: int, grad_outputs) -> None:
        self._started[node_id] = self.clock()

    def _after(self, key: tuple[str, int], node_id: int, grad_inputs, grad_outputs) -> None:
        started = self._started.pop(node_id, None)
        if started is not None:
            self.seconds[key] += self.clock() - started
            self.nodes[key] += 1

    def contribute(self, record: RunRecord) -> None:
        """Attach the backward time of each timed line to its OpSite (totals over windows)."""
        record.dispatch.backward_windows = self.windows if self.seconds else 0
        by_line = {}
        for site in record.dispatch.sites:
            by_line.setdefault((site.location.path, site.location.line), site)
        for (filename, line), seconds in self.seconds.items():
            site = by_line.get((display_path(filename), line))
            if site is not None:
                site.backward_s += seconds
                site.backward_nodes += self.nodes[(filename, line)]
