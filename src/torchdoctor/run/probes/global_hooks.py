"""The doctor's own global module hooks (the memory accounting's module stack, the first
evaluation sample's safe points, the knobs' model finder), told apart from the script's, so that
compiled code never sees them:

- `pause_own_module_hooks()` takes them out while compiled code runs (Dynamo would trace them
  into the user's graphs: a graph break of the doctor's making) and puts them back after;
- `quiet_global_hook_check(patches)` makes torch's `_has_any_global_hook()` count the script's
  global hooks only. `OptimizedModule.__call__` (`torch.compile(module)`) asks it on every call,
  before any compiled code runs, and warns into the script's stderr ("Using `torch.compile(module)`
  when there are global hooks on modules ...") when it says yes: with the doctor's hooks left out
  the script prints what it prints alone, whether it compiles before or after the doctor's hooks
  go in, and a script with global hooks of its own is still warned.

A hook is the doctor's when its function was defined in a `torchdoctor.` module.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from torch.nn.modules import module as nn_module

from torchdoctor.run.probes.patching import PatchSet

_HOOKS = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
          "_global_backward_hooks")
_FLAGS = ("_global_forward_hooks_always_called", "_global_forward_hooks_with_kwargs")  # hook id -> True


def is_ours(hook: Any) -> bool:
    function = getattr(hook, "__func__", hook)
    return str(getattr(function, "__module__", None) or "").startswith("torchdoctor.")


def _dicts(names: tuple[str, ...]) -> list[dict]:
    return [d for d in (getattr(nn_module, name, None) for name in names) if isinstance(d, dict)]


def _own_ids() -> set[int]:
    return {key for hooks in _dicts(_HOOKS) for key, hook in list(hooks.items()) if is_ours(hook)}


def script_has_global_hook() -> bool:
    """Whether a global module hook that is not the doctor's is registered."""
    own = _own_ids()
    return any(key not in own for d in _dicts(_HOOKS) + _dicts(_FLAGS) for key in list(d))


def pause_own_module_hooks() -> Callable[[], None] | None:
    """Take the doctor's global module hooks out; returns what puts them back (None: none were in).
    Called on every call into compiled code: with no global hook at all (outside the doctor's windows,
    nearly always) it returns after four lookups."""
    if not any(getattr(nn_module, name, None) for name in _HOOKS):
        return None
    own = _own_ids()
    if not own:
        return None
    taken = [(d, key, d.pop(key)) for d in _dicts(_HOOKS) + _dicts(_FLAGS) for key in list(d) if key in own]

    def restore() -> None:
        for d, key, value in taken:
            d[key] = value

    return restore


def quiet_global_hook_check(patches: PatchSet) -> None:
    if not callable(getattr(nn_module, "_has_any_global_hook", None)):
        return  # a torch without the check: nothing warns

    def make(original):
        @functools.wraps(original)
        def _has_any_global_hook():
            return bool(original()) and script_has_global_hook()

        return _has_any_global_hook

    patches.wrap(nn_module, "_has_any_global_hook", make)
