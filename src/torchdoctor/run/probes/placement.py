"""Where a tensor lives in the user's GPU run, told from a CPU run too.

On CUDA the device says it. On a CPU run every tensor is on the CPU, yet only some would be
on the GPU if the script ran there: the ones derived from the model's parameters or moved
with `.to(device)` / `.cuda()` / a `device=` argument. The others (an index tensor from
`torch.randint(...)` without `device=`, a Dataset's own tensors, results after `.cpu()`)
stay on the host in a GPU run too, and reading them is no device sync.

Inside the op sampler's windows every torch call passes through `propagate`, which marks
its tensor outputs as would-be-device when an input is (or when the call moves data to a
device), and as host after `.cpu()`/`.numpy()`. A tensor made before the window, never
moved, not a parameter and not part of an autograd graph is taken to be a host tensor: a
missed hazard on a CPU run is better than a false alarm.
"""

from __future__ import annotations

import torch

MARK = "_torchdoctor_on_device"  # attribute set on tensors the GPU run would hold on the device
_MOVES = {"to", "cuda"}
_TO_HOST = {"cpu", "numpy"}
_SEARCH_DEPTH = 2  # how deep into list/tuple/dict arguments inputs are looked for


def on_device(tensor: torch.Tensor) -> bool:
    """True when the tensor is, or in a GPU run would be, on the device: a parameter, part of
    an autograd graph (computed from parameters: a loss made just before the window too), or
    marked by `propagate`."""
    # the cheap reads first: every torch call in a sampled step asks this of each input, and
    # `isinstance(_, Parameter)` runs Python (Parameter's metaclass) for each one
    if tensor.requires_grad or getattr(tensor, MARK, False):
        return True
    return tensor.device.type != "cpu" or isinstance(tensor, torch.nn.Parameter)


def _tensors(value, depth: int = 0):
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < _SEARCH_DEPTH and isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item, depth + 1)
    elif depth < _SEARCH_DEPTH and isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item, depth + 1)


def _any_on_device(value, depth: int = 0) -> bool:
    """Whether a tensor among `value` (searched as `_tensors` does) is on the device: the same
    answer as `any(on_device(t) for t in _tensors(value))`, without a generator per level (asked
    of every torch call's arguments in a sampled step)."""
    if isinstance(value, torch.Tensor):
        return on_device(value)
    if depth < _SEARCH_DEPTH:
        if isinstance(value, (list, tuple)):
            for item in value:
                if _any_on_device(item, depth + 1):
                    return True
        elif isinstance(value, dict):
            for item in value.values():
                if _any_on_device(item, depth + 1):
                    return True
    return False


def _moves_to_device(name: str, args, kwargs) -> bool:
    if name == "cuda":
        return True
    if kwargs.get("device") is not None:
        return True
    # `.to(device)`, `.to("cuda")`, `.to(other_tensor)`: anything but a dtype alone
    return any(isinstance(a, (torch.device, str, int, torch.Tensor)) and not isinstance(a, bool) for a in args[1:])


def propagate(name: str, args, kwargs, out) -> None:
    """Mark `out` after a torch call `name(*args, **kwargs)` (CPU runs only need this)."""
    if name in _TO_HOST:
        # On a CPU run `.cpu()` hands back the very tensor it was called on: unmark it, or the
        # mark of the device tensor it came from would stay.
        for tensor in _tensors(out):
            if getattr(tensor, MARK, False):
                setattr(tensor, MARK, False)
        return
    if name in _MOVES and _moves_to_device(name, args, kwargs):
        device = True
    elif kwargs.get("device") is not None:  # a factory: torch.zeros(..., device=device)
        device = True
    else:
        device = _any_on_device(args) or (bool(kwargs) and _any_on_device(kwargs))
    if not device:
        return
    for tensor in _tensors(out):
        if tensor.device.type == "cpu" and not isinstance(tensor, torch.nn.Parameter):
            try:
                setattr(tensor, MARK, True)
            except (AttributeError, RuntimeError):  # a tensor subclass without a __dict__
                pass


def parameter_storages(roots) -> set[int]:
    """Data pointers of the leaf tensors (parameters) whose gradients `backward(roots)` computes:
    an in-place op on one of them is a parameter update."""
    seen, found = set(), set()
    stack = [t.grad_fn for t in _tensors(roots) if t.grad_fn is not None]
    while stack and len(seen) < 200_000:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)  # AccumulateGrad: the leaf it accumulates into
        if isinstance(variable, torch.Tensor):
            found.add(variable.data_ptr())
        stack.extend(next_node for next_node, _ in node.next_functions)
    return found
