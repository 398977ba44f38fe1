"""Memory probe: what fills memory in a training step, and what was live when the script ran
out of it.

The storage ledger (memory_ledger.py) runs in the session's memory window: the warmup steps,
from the first training activity (never timed). On CUDA the allocator's memory history is
recorded in the same steps, and its statistics give the device-level figures at the end. An
out-of-memory error inside the window is caught where it happens (the ledger knows every live
storage); one later is described from what can still be read: parameters, gradients and
optimizer states, the allocator's figures and largest blocks on CUDA.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterable

import torch
from torch.optim.optimizer import Optimizer, register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode

from torchdoctor.machine.memory import peak_rss_bytes
from torchdoctor.model.units import format_bytes
from torchdoctor.model.location import Location
from torchdoctor.model.memory_record import (GRADIENTS, OPTIMIZER_STATES, OTHER, PARAMETERS, LiveAllocation,
                                       MemoryBreakdown, OomEvent, ParallelMemory)
from torchdoctor.model.record import ProbeNote, RunRecord, StepSample
from torchdoctor.run.probes import cuda_memory
from torchdoctor.run.probes.frames import USER, classify_file, display_path
from torchdoctor.run.probes.memory_ledger import (LARGEST_KEPT, StepAccount, StorageLedger, _op_name, first_line,
                                                  innermost_user_location, is_out_of_memory, out_of_memory_in_chain,
                                                  requested_bytes)
from torchdoctor.run.process import current_pid
from torchdoctor.run.session import DONE, RunSession

try:
    import resource
except ImportError:  # Windows: no rlimits, no getrusage
    resource = None  # type: ignore[assignment]

CPU_DEVICE_MISSING = ("device-level figures not measurable on CPU: there is no device allocator to read (reserved "
                      "but unused memory, memory outside PyTorch); the tensor storages the steps made are counted")
METHOD = ("storage accounting in the warmup steps: every tensor storage an op made or autograd saved for backward, "
          "with its bytes and lifetime")


class _LedgerMode(TorchDispatchMode):
    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Off while torch.compile traces, on while compiled code runs: Dynamo compiles as it would
        without the doctor (without this it would skip the frame, for good)."""
        return True

    def __init__(self, probe: "MemoryProbe") -> None:
        super().__init__()
        self.probe = probe

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        probe = self.probe
        try:
            out = func(*args, **kwargs)
        except BaseException as exc:
            if current_pid() == probe.pid and is_out_of_memory(exc):
                probe.ledger.capture_failure(_op_name(func), sys._getframe(1), probe.parts_now)
                probe.failed_op = _shapes(func, args, kwargs)
            raise
        if current_pid() == probe.pid:  # not in a DataLoader worker forked while the window was open
            ledger = probe.ledger
            before = ledger.total
            ledger.on_outputs(func, args, kwargs, out, sys._getframe(1))
            limit = probe.session.config.memory_limit_bytes
            if limit is not None and ledger.total > limit:
                ledger.capture_failure(_op_name(func), sys._getframe(1), probe.parts_now)
                raise RuntimeError(f"torchdoctor's emulated device of {limit} bytes: can't allocate memory: you "
                                   f"tried to allocate {ledger.total - before} bytes")
        return out


def _shapes(func, args, kwargs) -> tuple[list[int], str, list[list[int]]] | None:
    """(output shape, dtype, input shapes) of an op that failed to allocate: the op run again on
    meta tensors, which have shapes and no storage (nothing is allocated, nothing computed)."""
    from torch.utils._python_dispatch import _disable_current_modes
    from torch.utils._pytree import tree_flatten, tree_map

    def meta(x):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta") if isinstance(x, torch.Tensor) \
            else x

    inputs = [list(t.shape) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)][:3]
    try:
        with _disable_current_modes():
            out = func(*tree_map(meta, args), **tree_map(meta, kwargs))
        first = next(t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        return [int(d) for d in first.shape], str(first.dtype).removeprefix("torch."), inputs
    except Exception:  # an op without a meta kernel: the inputs are still known
        return [], "", inputs


def _unique_storages(tensors: Iterable[torch.Tensor]) -> dict[int, int]:
    """id(storage) -> bytes, each storage once."""
    seen: dict[int, int] = {}
    for t in tensors:
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            continue
        seen.setdefault(id(storage), storage.nbytes())
    return seen


class MemoryProbe:
    name = "memory"

    def __init__(self, session: RunSession, optimizers: Callable[[], Iterable[Optimizer]],
                 torch_module: Any = torch) -> None:
        self.session = session
        self.optimizers = optimizers
        self.torch = torch_module
        self.pid = current_pid()
        self.ledger = StorageLedger()
        self.accounts: list[StepAccount] = []
        self.failure: OomEvent | None = None
        self.failed_op: tuple[list[int], str, list[list[int]]] | None = None  # the failing op's shapes
        self.parallel: ParallelMemory | None = None
        self.history = False
        self._active = False
        self._mode: _LedgerMode | None = None
        self._saved_hooks = None
        self._handles: list[Any] = []
        self._opened_by = ""
        self._cuda_available = bool(torch_module.cuda.is_available())

    # ---- the window ----------------------------------------------------------------------
    def install(self) -> None:
        pass  # the window opens at the first training activity (on_training_start)

    def uninstall(self) -> None:
        self.deactivate()

    @property
    def active(self) -> bool:
        return self._active

    def on_training_start(self, kind: str) -> None:
        self._open(kind)

    def on_optimizer_created(self) -> None:
        """The first forward usually follows: opening here sees step 1 whole (and its failure)."""
        self._open("optimizer")

    def _open(self, kind: str) -> None:
        if 1 in self.session.memory_at and not self._active and not self.accounts and not self.session.step_count:
            self._opened_by = kind
            self.activate("train")

    def activate(self, phase: str) -> None:
        if self._active:
            return
        self._active = True
        self.session.window_opened("memory")
        self._hold_all()
        self.ledger.start()
        nn_modules = torch.nn.modules.module
        try:
            post = nn_modules.register_module_forward_hook(self._leave, always_call=True)
        except TypeError:  # a torch without always_call: the stack is reset at every step instead
            post = nn_modules.register_module_forward_hook(self._leave)
        self._handles = [nn_modules.register_module_forward_pre_hook(self._enter), post,
                         register_optimizer_step_pre_hook(self._optimizer_step)]
        self._saved_hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._saved_hooks.__enter__()
        self._mode = _LedgerMode(self)
        self._mode.__enter__()
        if self._cuda_available and not self.history:
            self.history = cuda_memory.start_history(self.torch)

    def deactivate(self) -> None:
        if not self._active:
            return
        if self.ledger.event > 0:  # the window ends inside a step
            self._close_unfinished_step()
        self._active = False
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        if self._saved_hooks is not None:
            self._saved_hooks.__exit__(None, None, None)
            self._saved_hooks = None
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.parallel = self.parallel or self._parallel_wrapper()
        self.ledger.close()
        if self.history:
            cuda_memory.stop_history(self.torch)
        self.session.window_closed("memory")

    def can_stop_now(self) -> bool:
        """Its dispatch mode on top of the stack (a user's own mode entered later leaves first)."""
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        return self._mode is not None and _get_current_dispatch_mode() is self._mode

    # ---- hooks (only while the window is open) ------------------------------------------
    def _enter(self, module, args):
        if current_pid() == self.pid:
            self.ledger.enter_module(module, args)

    def _leave(self, module, args, output):
        if current_pid() == self.pid:
            self.ledger.leave_module(module)

    def _optimizer_step(self, optimizer, args, kwargs):
        self.ledger.on_optimizer()

    def _pack(self, tensor):
        if current_pid() == self.pid:
            self.ledger.on_saved(tensor)
        return tensor

    def _unpack(self, tensor):
        self.ledger.on_backward()
        return tensor

    def on_step(self, step: StepSample):
        if not self._active:
            # its window is behind (the last accounted step has closed): no later step needs this
            return DONE if step.index >= max(self.session.memory_at, default=0) else None
        # The window opened inside step 1: it saw the whole step only when it opened at the loader,
        # or when the forward came after (autograd saved tensors in the window)
        complete = step.index > 1 or self._opened_by in ("batch", "optimizer") or self.ledger.saved_in_step > 0
        held = self._held()  # read once: closing the step changes none of it
        self.accounts.append(self.ledger.close_step(step.index, step.samples, complete, self.parts_now(held)))
        self._hold_all(held)  # states made outside any op (Adam's step counters) join the next step
        self.ledger.start()  # ...as what it starts with, not as its first allocations

    def _close_unfinished_step(self) -> None:
        """The window ends inside a step (the code stopped or failed in it): keep what that
        step did so far, marked incomplete."""
        self.accounts.append(self.ledger.close_step(self.session.step_count + 1, self.session.ledger.samples,
                                                    False, self.parts_now()))

    def _hold_all(self, held: dict[str, list[torch.Tensor]] | None = None) -> None:
        for part, tensors in (self._held() if held is None else held).items():
            for tensor in tensors:
                self.ledger.hold(tensor, part)

    # ---- what the storages are -------------------------------------------------------------
    def _held(self) -> dict[str, list[torch.Tensor]]:
        """Parameters, their gradients and the optimizer states, as the run holds them now."""
        params: list[torch.Tensor] = []
        states: list[torch.Tensor] = []
        for optimizer in list(self.optimizers()):
            for group in optimizer.param_groups:
                params.extend(group["params"])
            for state in optimizer.state.values():
                states.extend(v for v in state.values() if isinstance(v, torch.Tensor))
        for root in self.ledger.roots:
            params.extend(root.parameters())
        grads = [p.grad for p in params if p.grad is not None]
        return {PARAMETERS: params, GRADIENTS: grads, OPTIMIZER_STATES: states}

    def parts_now(self, held: dict[str, list[torch.Tensor]] | None = None) -> dict[int, str]:
        """id(storage) -> part for what `_held()` returns now (or returned: `held`)."""
        parts: dict[int, str] = {}
        for part, tensors in (self._held() if held is None else held).items():
            for key in _unique_storages(tensors):
                parts.setdefault(key, part)
        return parts

    def _parallel_wrapper(self) -> ParallelMemory | None:
        for root in self.ledger.roots:
            if isinstance(root, torch.nn.DataParallel):
                inner = root.module
                return ParallelMemory("DataParallel", len(root.device_ids or []), _module_bytes(inner))
            if isinstance(root, torch.nn.parallel.DistributedDataParallel):
                as_view = bool(getattr(root, "gradient_as_bucket_view", False))
                grads = sum(p.numel() * p.element_size() for p in root.module.parameters() if p.requires_grad)
                try:
                    world = root.process_group.size()
                except Exception:
                    world = 0
                # The reducer's flat buckets hold every gradient; as a view they are the gradients
                return ParallelMemory("DistributedDataParallel", world, _module_bytes(root.module),
                                      bucket_bytes=0 if as_view else grads, gradient_as_bucket_view=as_view)
        return None

    # ---- a failure ---------------------------------------------------------------------------
    def on_failure(self, exc: BaseException) -> None:
        """The code raised `exc` (its traceback still holds the step's tensors). A wrapper that
        re-raised the allocator's error as its own (`raise X from e`) is seen through."""
        if self.failure is not None:
            return
        exc = out_of_memory_in_chain(exc)
        if exc is None:
            return
        message = first_line(exc)
        event = OomEvent(device="cuda" if "CUDA" in str(exc) or type(exc).__name__ == "OutOfMemoryError" else "cpu",
                         message=message, requested_bytes=requested_bytes(str(exc)),
                         step=self.session.step_count + 1, batch_size=self.session.ledger.samples)
        event.batch_shape = self.session.ledger.shape()
        if self.failed_op is not None:
            event.shape, event.dtype, event.input_shapes = self.failed_op
        if event.batch_size:
            event.batch_basis = "rows the DataLoader delivered"
        elif self.ledger.input_rows:
            event.batch_size, event.batch_basis = self.ledger.input_rows, "the model input's first dimension"
        caught = self.ledger.failure
        if caught is not None:
            event.accounted = True
            event.op, event.location, event.module = caught["op"], caught["location"], caught["module"]
            event.phase, event.live_bytes, event.parts = caught["phase"], caught["live_bytes"], caught["parts"]
            event.largest, event.modules = caught["largest"], caught["modules"]
        else:
            self._describe_late_failure(event, exc)
        if event.device == "cuda":
            figures = cuda_memory.device_figures(self._device_index(), self.torch)
            if figures:
                event.device_total_bytes, event.device_free_bytes = figures["device_total_bytes"], figures["free_bytes"]
                event.reserved_unused_bytes = max(0, figures["reserved_now_bytes"] - figures["allocated_now_bytes"])
                if not event.accounted:
                    event.live_bytes = figures["allocated_now_bytes"]
                    event.largest = self._snapshot_blocks()
        else:
            event.limit = _address_space_limit()
        self.failure = event

    def _describe_late_failure(self, event: OomEvent, exc: BaseException) -> None:
        """Outside the window: only what is held across steps can be told apart; the location
        is the innermost frame of the user's code in the traceback (the line that allocated, not
        the `loss = loss_fn(model(x), y)` that called down to it)."""
        event.location = innermost_user_location(exc)
        seen: set[int] = set()
        for part, tensors in self._held().items():
            for key, nbytes in _unique_storages(tensors).items():
                if key not in seen:
                    seen.add(key)
                    event.parts[part] = event.parts.get(part, 0) + nbytes

    def _snapshot_blocks(self) -> list[LiveAllocation]:
        blocks = cuda_memory.largest_blocks(cuda_memory.snapshot(self.torch), lambda f: classify_file(f) == USER,
                                            LARGEST_KEPT)
        return [LiveAllocation(bytes=b["bytes"], part=OTHER,
                               location=Location(display_path(b["path"]), b["line"], b["function"]) if b["path"] else None)
                for b in blocks]

    def _device_index(self) -> int:
        try:
            return self.torch.cuda.current_device()
        except Exception:
            return 0

    # ---- result ----------------------------------------------------------------------------
    def contribute(self, record: RunRecord) -> None:
        self.deactivate()
        memory = build_breakdown(self.accounts, self.parallel, self.failure)
        if memory is None:
            if self.session.memory_at and record.steps:
                record.probe_notes.append(ProbeNote(self.name, "no step was accounted (the window never opened)"))
            return
        figures = cuda_memory.device_figures(self._device_index(), self.torch) if self._cuda_available else None
        if figures:
            memory.device = f"cuda:{self._device_index()}"
            for key in ("device_total_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "reserved_unused_bytes",
                        "outside_pytorch_bytes"):
                setattr(memory, key, figures[key])
        else:
            memory.device_missing = CPU_DEVICE_MISSING
            memory.process_peak_rss_bytes = peak_rss_bytes()
        if self.history:
            memory.notes.append("CUDA allocator history was recorded in the accounted steps")
        record.memory = memory


def build_breakdown(accounts: list[StepAccount], parallel: ParallelMemory | None,
                    failure: OomEvent | None) -> MemoryBreakdown | None:
    """The breakdown of the highest complete accounted step (any step when none is complete)."""
    if not accounts and failure is None:
        return None
    memory = MemoryBreakdown(device="cpu", method=METHOD, parallel=parallel, failure=failure)
    memory.steps = [a.memory for a in accounts]
    candidates = [a for a in accounts if a.memory.complete] or accounts
    if candidates:
        top = max(candidates, key=lambda a: (a.memory.peak_bytes, a.memory.step))
        memory.peak_step, memory.peak_bytes = top.memory.step, top.memory.peak_bytes
        memory.parts, memory.phase_peaks = dict(top.memory.parts), dict(top.memory.phase_peaks)
        memory.batch_size = top.memory.samples
        memory.modules, memory.largest, memory.timeline = top.modules, top.largest, top.timeline
        memory.timeline_events = top.events
        memory.backward_event, memory.optimizer_event = top.backward_event, top.optimizer_event
        if parallel is not None and parallel.bucket_bytes:
            # the buckets were made with the wrapper, before any accounted step: live throughout
            memory.parts[OTHER] = memory.parts.get(OTHER, 0) + parallel.bucket_bytes
            memory.peak_bytes += parallel.bucket_bytes
    return memory


def _module_bytes(module: torch.nn.Module) -> int:
    tensors = [*module.parameters(), *module.buffers()]
    return sum(_unique_storages(tensors).values())


def _address_space_limit() -> str:
    if resource is None:
        return ""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        return ""
    if soft == resource.RLIM_INFINITY:
        return ""
    return f"RLIMIT_AS {format_bytes(soft)} (the process's address space)"
