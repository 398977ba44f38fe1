"""Reversible attribute patches: every probe patch goes through here so that uninstall
restores exactly what was there, and tests can assert nothing outlives a run."""

from __future__ import annotations

from typing import Any, Callable

_INHERITED = object()  # the attribute came from a base class: restore by deleting ours


class PatchSet:
    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, name: str, make_wrapper: Callable[[Any], Any]) -> None:
        """Replace owner.name by make_wrapper(current owner.name)."""
        current = getattr(owner, name)
        own = vars(owner).get(name, _INHERITED) if hasattr(owner, "__dict__") else current
        self._undo.append((owner, name, own))
        wrapper = make_wrapper(current)
        try:
            wrapper.__wrapped__ = current
            wrapper.__torchdoctor_patch__ = True
        except (AttributeError, TypeError):
            pass
        setattr(owner, name, wrapper)

    def restore(self) -> None:
        while self._undo:
            owner, name, original = self._undo.pop()
            if original is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)

    def __len__(self) -> int:
        return len(self._undo)


def is_patched(obj: Any) -> bool:
    return bool(getattr(obj, "__torchdoctor_patch__", False))
