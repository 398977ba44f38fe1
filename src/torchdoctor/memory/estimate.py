"""`torchdoctor memory --estimate`: the script's steps on fake tensors (FakeTensorMode).

Every tensor the script makes, the model's parameters included, has a shape, a dtype and a
device but no memory, and ops compute shapes without computing values: the storage accounting
sees exactly the bytes each tensor would take, on a machine without the device. Parameters,
gradients and optimizer states are exact; activations and temporaries are those of the traced
step. What fake tensors cannot give is a value. A read (`.item()`, `if loss > 0:`) is answered
with 1 (False for a boolean) and reported with its line: harmless for logging, possibly a wrong
path for a branch. An op whose output shape depends on the data (nonzero, boolean-mask indexing)
cannot be answered: the estimate ends there, with the steps that completed before it, and says
where.
"""

from __future__ import annotations

import sys
import warnings
from typing import Callable

from torchdoctor.run.probes.frames import frame_line
from torchdoctor.model.record import ProbeNote, RunRecord

DATA_DEPENDENT = ("DataDependentOutputException", "DynamicOutputShapeException", "UnsupportedOperatorException")


def on_fake_tensors(run: Callable[[], RunRecord]) -> RunRecord:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    from torchdoctor.run.probes.patching import PatchSet

    patches = PatchSet()
    # Module.to/.cuda() swap a fake parameter in place, which torch refuses for fake tensors
    # (the fake mode holds weak references to them): assign the moved parameter instead.
    patches.wrap(torch.nn.Module, "_apply", lambda original: _assigning_apply)
    # The loader's sampler draws real random numbers (a seed, a permutation) and reads them
    patches.wrap(DataLoader, "__iter__", _real_tensors)
    patches.wrap(_BaseDataLoaderIter, "__next__", _real_tensors)
    reads = _ValueReads()
    # f"{loss:.4f}" formats a 0-d tensor through its value, which Tensor.__format__ reads only for
    # a plain Tensor (a fake one raises TypeError); a logger's deepcopy of a fake tensor (Lightning's
    # self.log) copies memory it does not have: both answered like any other read
    patches.wrap(torch.Tensor, "__format__", lambda original: _fake_aware_format(original, reads))
    patches.wrap(torch.Tensor, "__deepcopy__", _fake_aware_deepcopy)
    try:
        with FakeTensorMode(allow_non_fake_inputs=True), reads, warnings.catch_warnings():
            # the op sampler learns parameters by their storage's address, which a fake tensor has not
            warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
            record = run()
    finally:
        patches.restore()
    for note in (stop_reason(record), reads.summary()):
        if note:
            record.probe_notes.append(ProbeNote("estimate", note))
    return record


def _fake_aware_format(original, reads: "_ValueReads"):
    def __format__(tensor, spec):
        from torch._subclasses.fake_tensor import FakeTensor

        if isinstance(tensor, FakeTensor) and tensor.dim() == 0:
            reads.note(sys._getframe(1))
            return format(reads.answer(tensor), spec)
        return original(tensor, spec)

    return __format__


def _fake_aware_deepcopy(original):
    def __deepcopy__(tensor, memo):
        from torch._subclasses.fake_tensor import FakeTensor

        if isinstance(tensor, FakeTensor):
            copy = tensor.detach().clone()  # a fake of the same shape, dtype and device: no memory to copy
            copy.requires_grad_(tensor.requires_grad)
            memo[id(tensor)] = copy
            return copy
        return original(tensor, memo)

    return __deepcopy__


def _real_tensors(original):
    def call(*args, **kwargs):
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            return original(*args, **kwargs)

    return call


class _ValueReads:
    """Answers a read of a fake tensor's value (`.item()`, `if t > 0:`) with 1, or False for
    a boolean, and remembers where: a logging line is harmless, a branch may not follow the
    path a real run would."""

    def __init__(self) -> None:
        self.sites: dict[tuple[str, int, str], int] = {}
        self._mode = None

    def __enter__(self):
        import torch
        from torch._subclasses.fake_tensor import FakeTensor
        from torch.utils._python_dispatch import TorchDispatchMode

        reads = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func is torch.ops.aten._local_scalar_dense.default and isinstance(args[0], FakeTensor):
                    reads.note(sys._getframe(1))
                    return reads.answer(args[0])
                return func(*args, **(kwargs or {}))

        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)

    @staticmethod
    def answer(tensor):
        import torch

        return False if tensor.dtype == torch.bool else 1.0 if tensor.is_floating_point() else 1

    def note(self, frame) -> None:
        from torchdoctor.run.probes.frames import display_path, user_frame

        user, internal = user_frame(frame)
        if user is None or internal:  # torch's own reads (an optimizer's step counter) steer nothing of ours
            return
        code = user.f_code
        key = (display_path(code.co_filename), frame_line(user), getattr(code, "co_qualname", code.co_name))
        self.sites[key] = self.sites.get(key, 0) + 1

    def summary(self) -> str | None:
        if not self.sites:
            return None
        where = ", ".join(f"{path}:{line} ({count}x)" for (path, line, _), count in list(self.sites.items())[:5])
        return (f"the script read tensor values at {where}; fake tensors have none, so torchdoctor answered 1 "
                "(False for a boolean) and went on: harmless for logging, but a branch on such a value may not "
                "take the path a real run would")


def stop_reason(record: RunRecord) -> str | None:
    """Why the fake run ended early, in words (None when it reached its steps)."""
    error = record.run.error or ""
    kind = next((k for k in DATA_DEPENDENT if k in error), None)
    if kind is None:
        return None
    where = _innermost_user_line(error)
    done = len(record.steps)
    return (f"cannot go on: the step needs the data itself ({kind}{' at ' + where if where else ''}: an op whose "
            f"output size depends on the values, as nonzero or boolean-mask indexing); fake tensors have no values, so "
            f"the estimate stops there with {done} complete step{'s' if done != 1 else ''}")


def why_the_estimate_stopped(record: RunRecord) -> str:
    """The fake run raised: where and why, as a limit of fake tensors (the script runs fine on real
    ones as far as torchdoctor knows)."""
    error = (record.run.error or "").strip().splitlines()
    last = error[-1] if error else "an error"
    where = _innermost_user_line(record.run.error or "")
    return (f"the estimate on fake tensors could not go on{' at ' + where if where else ''} ({last[:200]}): fake "
            "tensors have shapes but no values or memory, and this step needs one of them")


def _innermost_user_line(traceback_text: str) -> str:
    """The last `File "...", line N` of the traceback that is the user's code (not torch's)."""
    from torchdoctor.run.probes.frames import USER, classify_file, display_path

    found = ""
    for line in traceback_text.splitlines():
        line = line.strip()  # File "train.py", line 42, in <module>
        if not line.startswith('File "'):
            continue
        try:
            path, number = line.split('"')[1], line.split("line ")[1].split(",")[0]
        except IndexError:
            continue
        if classify_file(path) == USER:
            found = f"{display_path(path)}:{number}"
    return found


def _assigning_apply(module, fn, recurse=True):
    """Module._apply for fake tensors: each parameter, gradient and buffer replaced by fn's result."""
    import torch

    if recurse:
        for child in module.children():
            child._apply(fn)
    for key, param in module._parameters.items():
        if param is None:
            continue
        with torch.no_grad():
            moved = torch.nn.Parameter(fn(param), requires_grad=param.requires_grad)
        if param.grad is not None:
            with torch.no_grad():
                moved.grad = fn(param.grad)
        module._parameters[key] = moved
    for key, buffer in module._buffers.items():
        if buffer is not None:
            module._buffers[key] = fn(buffer)
    return module
