"""Storage accounting: every tensor storage a training step creates or holds, with its bytes,
when it was made and freed, what made it, and what it is (parameter, gradient, optimizer
state, activation saved for backward, temporary).

Three hooks feed the ledger while its window is open, and nothing runs outside it:
- a TorchDispatchMode sees every op's outputs: an output on a storage the ledger does not
  know, and that no input shares (a view or an in-place result shares its input's), is a new
  allocation; a finalizer on the storage object (PyTorch keeps one Python object per storage
  while the storage lives) records its free;
- saved-tensor hooks see what autograd keeps for backward: those storages are activations,
  charged to the innermost module whose forward was running;
- global module forward hooks keep that stack of modules.

It works the same on any device (the storage's bytes are what the allocator was asked for;
CUDA rounds to 512-byte blocks), and on fake tensors, which is how `memory --estimate` runs.
"""

from __future__ import annotations

import functools
import re
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch

from torchdoctor.model.units import parse_bytes
from torchdoctor.model.location import Location
from torchdoctor.model.memory_record import (ACTIVATIONS, BACKWARD, FORWARD, OPTIMIZER, OTHER,
                                       PARAMETERS, TEMPORARIES, LiveAllocation, MemoryPoint, ModuleMemory, StepMemory)
from torchdoctor.run.probes.frames import USER, classify_file, display_path, frame_line, library_of, location_of, user_frame
from torchdoctor.run.probes.outside_compiled import outside_compiled

MAX_TIMELINE_POINTS = 240  # a chart ~900 px wide; each point keeps its bucket's largest value
LARGEST_KEPT = 10
MODULES_KEPT = 24
_CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential)


class _Entry:
    """One storage in the ledger."""

    __slots__ = ("nbytes", "born", "died", "part", "saved", "module", "frame_key", "op", "shape", "dtype", "new")

    def __init__(self, nbytes: int, born: int, part: str | None, new: bool) -> None:
        self.nbytes, self.born, self.died, self.part, self.new = nbytes, born, None, part, new
        self.saved = False
        self.module: str | None = None
        self.frame_key: tuple | None = None
        self.op = ""
        self.shape: list[int] = []
        self.dtype = ""


@dataclass
class _ModuleAcc:
    kind: str
    container: str | None
    own_saved: int = 0
    input_bytes: int = 0
    calls: int = 0


@dataclass
class StepAccount:
    """What one closed step left: its summary and the details of its peak."""

    memory: StepMemory
    largest: list[LiveAllocation] = field(default_factory=list)
    modules: list[ModuleMemory] = field(default_factory=list)
    timeline: list[MemoryPoint] = field(default_factory=list)
    events: int = 0
    backward_event: int | None = None
    optimizer_event: int | None = None


def _tensors(value: Any, depth: int = 0) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 2 and isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item, depth + 1)


def _storage(tensor: torch.Tensor):
    try:
        return tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse, nested or a subclass without storage
        return None


class StorageLedger:
    def __init__(self) -> None:
        self.live: dict[int, _Entry] = {}  # id(storage object) -> entry
        self.step_entries: list[_Entry] = []  # everything live at some point of the open step
        self.total = 0
        self.event = 0
        self.phase = FORWARD
        self.phase_peaks: dict[str, int] = {}
        self.peak = 0
        self.peak_event = 0
        self.points: list[tuple[int, int]] = []
        self.backward_event: int | None = None
        self.optimizer_event: int | None = None
        self.module_stack: list[str] = []
        self.modules: dict[str, _ModuleAcc] = {}
        self.roots: list[torch.nn.Module] = []
        self._names: dict[int, tuple[str, str | None]] = {}  # id(module) -> (name, container)
        self.container_sizes: dict[str, int] = {}
        self.failure: dict[str, Any] | None = None  # filled by `capture_failure`
        self.saved_in_step = 0  # storages autograd saved in the open step
        self.input_rows: int | None = None  # first dimension of the first model input of the step
        # a weak reference per storage, its callback `_freed`: plain weakrefs, not weakref.finalize, whose
        # callback is library Python that Dynamo would count as a compiled frame when a storage dies inside
        # the script's compiled call (outside_compiled.py); dropping the list stops the callbacks
        self._watches: list[weakref.ref] = []

    # ---- what exists before the step ---------------------------------------------------
    def hold(self, tensor: torch.Tensor, part: str) -> None:
        """A storage alive before the step (a parameter, a gradient, an optimizer state)."""
        storage = _storage(tensor)
        if storage is None:
            return
        key = id(storage)
        entry = self.live.get(key)
        if entry is not None:
            if entry.part is None or not entry.new:
                entry.part = part
            return
        nbytes = storage.nbytes()
        if nbytes:
            self._add(key, storage, nbytes, part, new=False)

    def _add(self, key: int, storage, nbytes: int, part: str | None, new: bool) -> _Entry:
        entry = _Entry(nbytes, self.event, part, new)
        self.live[key] = entry
        self.step_entries.append(entry)
        self.total += nbytes
        self._moved()
        self._watches.append(weakref.ref(storage, functools.partial(self._freed, key, entry)))
        return entry

    def close(self) -> None:
        """The window ends: forget every storage (their weak references, dropped, no longer call back)."""
        self._watches.clear()
        self.live.clear()
        self.step_entries.clear()
        self.total = 0

    @outside_compiled
    def _freed(self, key: int, entry: _Entry, _ref=None) -> None:
        if self.live.get(key) is entry:
            del self.live[key]
            self.total -= entry.nbytes
            self._moved()
            entry.died = self.event

    def _moved(self) -> None:
        self.event += 1
        total = self.total
        self.points.append((self.event, total))
        if total > self.peak:
            self.peak, self.peak_event = total, self.event
        if total > self.phase_peaks.get(self.phase, 0):
            self.phase_peaks[self.phase] = total

    # ---- during the step -------------------------------------------------------------
    def on_outputs(self, func, args, kwargs, out, frame) -> None:
        if isinstance(out, torch.Tensor):  # most ops: one tensor out, no generator to walk
            self._on_output(func, args, kwargs, out, frame)
            return
        for tensor in _tensors(out):
            self._on_output(func, args, kwargs, tensor, frame)

    def _on_output(self, func, args, kwargs, tensor: torch.Tensor, frame) -> None:
        storage = _storage(tensor)
        if storage is None or id(storage) in self.live:
            return
        key, nbytes = id(storage), storage.nbytes()
        if not nbytes or self._shares_input(key, args, kwargs):
            return
        entry = self._add(key, storage, nbytes, None, new=True)
        entry.op = _op_name(func)
        entry.shape, entry.dtype = list(tensor.shape), str(tensor.dtype).removeprefix("torch.")
        entry.module = self.module_stack[-1] if self.module_stack else None
        user, _ = user_frame(frame)  # the user line of each allocation
        if user is not None:
            code = user.f_code
            entry.frame_key = (code.co_filename, frame_line(user), getattr(code, "co_qualname", code.co_name))

    @staticmethod
    def _shares_input(key: int, args, kwargs) -> bool:
        for value in (*args, *kwargs.values()) if kwargs else args:
            if isinstance(value, torch.Tensor):  # most inputs: no generator to walk
                storage = _storage(value)
                if storage is not None and id(storage) == key:
                    return True
            elif isinstance(value, (list, tuple)):  # nor for a scalar, where `_tensors` finds nothing
                for tensor in _tensors(value):
                    storage = _storage(tensor)
                    if storage is not None and id(storage) == key:
                        return True
        return False

    def on_saved(self, tensor: torch.Tensor) -> None:
        """Autograd keeps `tensor` for backward."""
        storage = _storage(tensor)
        if storage is None:
            return
        key = id(storage)
        entry = self.live.get(key)
        if entry is None:  # made outside any op we saw (a batch from a worker process)
            nbytes = storage.nbytes()
            if not nbytes or tensor.numel() * tensor.element_size() < nbytes:
                return  # a slice of something older (a dataset held in memory): not the step's
            entry = self._add(key, storage, nbytes, None, new=True)
            entry.op, entry.shape = "(input)", list(tensor.shape)
            entry.dtype = str(tensor.dtype).removeprefix("torch.")
        if entry.saved or entry.part is not None:  # counted once; parameters are not activations
            return
        entry.saved = True
        self.saved_in_step += 1
        module = self.module_stack[-1] if self.module_stack else None
        entry.module = module
        if module is not None:
            self.modules[module].own_saved += entry.nbytes

    def on_backward(self) -> None:
        if self.backward_event is None and self.phase == FORWARD:
            self.backward_event = self.event
            self.phase = BACKWARD
            self.phase_peaks[BACKWARD] = max(self.phase_peaks.get(BACKWARD, 0), self.total)

    def on_optimizer(self) -> None:
        if self.optimizer_event is None:
            self.optimizer_event = self.event
        self.phase = OPTIMIZER
        # what is live as the step begins is live during it, whether or not it allocates
        self.phase_peaks[OPTIMIZER] = max(self.phase_peaks.get(OPTIMIZER, 0), self.total)

    def enter_module(self, module: torch.nn.Module, args) -> None:
        names = self._names.get(id(module))
        if names is None:
            if self.module_stack:  # a module called inside another but not part of it: name it by kind
                names = (f"{self.module_stack[-1]}.<{type(module).__name__}>".lstrip("."), None)
                self._names[id(module)] = names
            else:
                names = self._add_root(module)
        name, container = names
        if not self.module_stack and self.input_rows is None:  # the model's own input: rows on its first dimension
            first = next((t for a in args for t in _tensors(a)), None)
            self.input_rows = int(first.shape[0]) if first is not None and first.dim() > 0 else None
        acc = self.modules.get(name)
        if acc is None:
            acc = self.modules[name] = _ModuleAcc(type(module).__name__, container)
        acc.calls += 1
        acc.input_bytes += sum(t.numel() * t.element_size() for a in args for t in _tensors(a))
        self.module_stack.append(name)

    def leave_module(self, module: torch.nn.Module) -> None:
        if self.module_stack:
            self.module_stack.pop()

    def _add_root(self, root: torch.nn.Module) -> tuple[str, str | None]:
        prefix = "" if not self.roots else type(root).__name__
        self.roots.append(root)
        for name, module in root.named_modules():
            full = ".".join(p for p in (prefix, name) if p)
            self._names.setdefault(id(module), (full, None))
            if isinstance(module, _CONTAINERS):
                self.container_sizes[full] = len(module)
                for child_name, child in module.named_children():
                    child_full = ".".join(p for p in (full, child_name) if p)
                    self._names[id(child)] = (child_full, full)
        for param in root.parameters():
            self.hold(param, PARAMETERS)
        for buffer in root.buffers():
            self.hold(buffer, OTHER)
        return self._names[id(root)]

    # ---- a failure ---------------------------------------------------------------------
    def capture_failure(self, op: str, frame, resolve: Callable[[], dict[int, str]]) -> None:
        """An allocation failed inside `op`: keep what was live and where it happened."""
        if self.failure is not None:
            return
        parts = resolve()
        live = [(key, e) for key, e in self.live.items()]
        user, _ = user_frame(frame) if frame is not None else (None, False)
        self.failure = {
            "op": op,
            "location": location_of(user) if user is not None else None,
            "module": self.module_stack[-1] if self.module_stack else None,
            "phase": self.phase,
            "live_bytes": self.total,
            "parts": _sum_parts((self._part(e, parts.get(key)), e.nbytes) for key, e in live),
            "largest": [self._allocation(e, parts.get(key)) for key, e in
                        sorted(live, key=lambda kv: -kv[1].nbytes)[:LARGEST_KEPT]],
            "modules": self._module_table(),
        }

    # ---- closing a step --------------------------------------------------------------------
    def close_step(self, step: int, samples: int | None, complete: bool, parts_of: dict[int, str]) -> StepAccount:
        """`parts_of`: id(storage) -> part for the storages that are parameters, gradients or
        optimizer states now (the step's end)."""
        at_peak = [e for e in self.step_entries if e.born <= self.peak_event and (e.died is None or e.died > self.peak_event)]
        keys = {id(e): k for k, e in self.live.items()}
        for e in self.step_entries:  # what the storages turned out to be
            part = parts_of.get(keys.get(id(e), -1))
            if part is not None:
                e.part = part
        parts = _sum_parts((self._part(e, None), e.nbytes) for e in at_peak)
        account = StepAccount(
            memory=StepMemory(step=step, peak_bytes=self.peak, phase_peaks=dict(self.phase_peaks), parts=parts,
                              samples=samples if samples is not None else self.input_rows, complete=complete),
            largest=[self._allocation(e, None) for e in sorted(at_peak, key=lambda e: -e.nbytes)[:LARGEST_KEPT]],
            modules=self._module_table(),
            timeline=_downsample(self.points),
            events=self.event,
            backward_event=self.backward_event,
            optimizer_event=self.optimizer_event,
        )
        self._next_step()
        return account

    def _next_step(self) -> None:
        """What is still alive is what the next step starts with."""
        self.step_entries = list(self.live.values())
        for e in self.step_entries:
            e.born, e.new = 0, False
            if e.part is None:
                e.part = OTHER  # made in an earlier step and kept (a running loss, a cached tensor)
        self.start()

    def start(self) -> None:
        """A step starts from what the ledger holds now."""
        self.event = 0
        self.points = [(0, self.total)]
        self.phase = FORWARD
        self.peak, self.peak_event = self.total, 0
        self.phase_peaks = {FORWARD: self.total}
        self.backward_event = self.optimizer_event = None
        self.modules = {}
        self.module_stack = []
        self.saved_in_step = 0
        self.input_rows: int | None = None

    @staticmethod
    def _part(entry: _Entry, part: str | None) -> str:
        if part is not None:
            return part
        if entry.part is not None:
            return entry.part
        return ACTIVATIONS if entry.saved else TEMPORARIES if entry.new else OTHER

    def _allocation(self, entry: _Entry, part: str | None) -> LiveAllocation:
        key = entry.frame_key
        return LiveAllocation(bytes=entry.nbytes, part=self._part(entry, part),
                              location=Location(display_path(key[0]), key[1], key[2]) if key else None,
                              op=entry.op, shape=entry.shape, dtype=entry.dtype, module=entry.module)

    def _module_table(self) -> list[ModuleMemory]:
        """Every module's saved bytes, its own and those of the modules inside it."""
        inclusive: dict[str, int] = {name: 0 for name in self.modules}
        for name, acc in self.modules.items():
            if not acc.own_saved:
                continue
            pieces = name.split(".") if name else []
            for i in range(len(pieces) + 1):  # the module itself and every enclosing one
                enclosing = ".".join(pieces[:i])
                if enclosing in inclusive:
                    inclusive[enclosing] += acc.own_saved
        table = [ModuleMemory(module=name, kind=acc.kind, saved_bytes=inclusive[name], own_saved_bytes=acc.own_saved,
                              input_bytes=acc.input_bytes, calls=acc.calls, container=acc.container,
                              container_size=self.container_sizes.get(acc.container or "", 0))
                 for name, acc in self.modules.items() if inclusive[name]]
        table.sort(key=lambda m: (-m.saved_bytes, m.module))
        blocks = [m for m in table if m.container is not None]
        kept = table[:MODULES_KEPT]
        # the blocks of the fullest container stay, for the checkpointing advice
        return kept + [m for m in blocks if m not in kept][: 4 * MODULES_KEPT]


def _op_name(func) -> str:
    schema = getattr(func, "_schema", None)
    return schema.name if schema is not None else getattr(func, "__name__", str(func))


def _sum_parts(items: Iterable[tuple[str, int]]) -> dict[str, int]:
    parts: dict[str, int] = {}
    for part, nbytes in items:
        parts[part] = parts.get(part, 0) + nbytes
    return parts


def _downsample(points: list[tuple[int, int]]) -> list[MemoryPoint]:
    if len(points) <= MAX_TIMELINE_POINTS:
        return [MemoryPoint(e, b) for e, b in points]
    size = -(-len(points) // MAX_TIMELINE_POINTS)
    out = []
    for i in range(0, len(points), size):
        bucket = points[i:i + size]
        event, value = max(bucket, key=lambda p: p[1])  # the bucket's highest point: the peak stays visible
        out.append(MemoryPoint(event, value))
    return out


# ---- out-of-memory errors ----------------------------------------------------------------
_CUDA_REQUEST = re.compile(r"Tried to allocate ([\d.]+) ([KMGT]i?B)")
_CPU_REQUEST = re.compile(r"you tried to allocate (\d+) bytes")


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    if isinstance(exc, RuntimeError):
        text = str(exc)
        return "can't allocate memory" in text or "out of memory" in text.lower()
    return False


def requested_bytes(message: str) -> int | None:
    """The size of the allocation that failed, as the error message states it."""
    match = _CPU_REQUEST.search(message)
    if match:
        return int(match.group(1))
    match = _CUDA_REQUEST.search(message)
    if match:
        return parse_bytes(match.group(1) + match.group(2))  # PyTorch prints sizes in powers of 1024
    return None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def out_of_memory_in_chain(exc: BaseException) -> BaseException | None:
    """`exc`, or the exception it was raised from or during, that ran out of memory."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if is_out_of_memory(exc):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def innermost_user_location(exc: BaseException) -> Location | None:
    """The innermost traceback entry in the user's own code (its own files first, an installed
    library's when the failure is wholly inside one), with the line the traceback recorded."""
    own, library = None, None
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if classify_file(filename) == USER:
            code = tb.tb_frame.f_code
            here = Location(path=display_path(filename), line=tb.tb_lineno,
                            function=getattr(code, "co_qualname", code.co_name))
            if library_of(filename) is None:
                own = here
            else:
                library = here
        tb = tb.tb_next
    return own or library


def frame_of(exc: BaseException):
    """The innermost frame of the exception's traceback (None without one)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame if tb is not None else None
