"""The user's own modules a file imports: a per-step call to a helper in another module of the
project (`misc.all_reduce_mean(loss_value)`, defined in `util/misc.py`) reads a device value on
the host when the helper does, as often as the call runs.

A launcher script with no training step of its own that calls a project function in a loop
(`for epoch in ...: train_one_epoch(...)`, imported from `open_lm/train.py`) has its training
loop in that module: `training_modules` names such modules, and `lint` lints them with the
script, reporting one only when it holds a training step (`api.lint_paths`).

A module is found where Python would find it when the script runs from its own folder: the
importing file's folder or one of its parents, as `a/b.py` or `a/b/__init__.py`. Only module-level
functions are followed, one call deep, for reads made once per call (not in a loop of their own),
and only in files small enough to lint. The files are read,
parsed and never executed; what is learnt is cached per process."""

from __future__ import annotations

import ast
import functools
import os
from dataclasses import dataclass
from pathlib import Path

from torchdoctor.lint.facts import Facts
from torchdoctor.lint.model import enclosing_loops
from torchdoctor.lint.parse_cost import slow_to_parse
from torchdoctor.lint.source import MAX_FILE_BYTES, Problem, read_source

FOLLOWED_MODULES = 4  # at most this many modules followed from one launcher script
PARENT_FOLDERS = 2  # the importing file's folder and up to this many above it (a `scripts/` or `tools/` folder)
# Names that are never the project's modules: what a training script imports from installed packages.
LIBRARIES = frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "numpy", "np", "os", "sys", "math", "time", "random",
    "json", "logging", "collections", "functools", "itertools", "typing", "dataclasses", "pathlib", "argparse",
    "transformers", "accelerate", "lightning", "pytorch_lightning", "timm", "datasets", "tqdm", "wandb",
    "tensorboardX", "scipy", "sklearn", "pandas", "matplotlib", "PIL", "cv2", "einops", "gym", "gymnasium",
})


@dataclass(frozen=True)
class HelperRead:
    """A module-level function of another project file that reads a device value on the host."""

    path: str  # the helper's file, relative to the folder the import was resolved from
    line: int
    what: str  # the read, as the sync check describes it (`x_reduce.item()`)


def helper_read(qualified: str, importer: str | None) -> HelperRead | None:
    """The host read inside the project function `qualified` (`util.misc.all_reduce_mean`) that
    the file at `importer` imports, or None (not a project module, not found, no read)."""
    if not importer or "." not in qualified or qualified.partition(".")[0] in LIBRARIES:
        return None
    module, _, function = qualified.rpartition(".")
    found = _module_file(module, str(Path(importer).resolve().parent))
    if found is None:
        return None
    path, base = found
    read = _reads_in(path, function)
    if read is None:
        return None
    return HelperRead(os.path.relpath(path, base).replace(os.sep, "/"), *read)


def training_modules(facts: Facts) -> list[str]:
    """The project modules (paths on disk) whose functions this file calls inside one of its
    loops, when the file has no training step of its own: where a launcher's training loop
    lives. Empty for a file that trains itself, or that is not on disk."""
    context = facts.context
    if not facts.path or context.step_loops or context.step_functions or context.backward_calls:
        return []
    folder: str | None = None
    found: list[str] = []
    for call, block in facts.model.calls:
        qualified = facts.qualify(call.func)
        if not qualified or "." not in qualified or qualified.partition(".")[0] in LIBRARIES:
            continue
        if next(enclosing_loops(block), None) is None:
            continue
        folder = folder or str(Path(facts.path).resolve().parent)
        where = _module_file(qualified.rpartition(".")[0], folder)
        if where is not None and where[0] not in found:
            found.append(where[0])
            if len(found) == FOLLOWED_MODULES:
                break
    return found


@functools.lru_cache(maxsize=256)
def _module_file(module: str, folder: str) -> tuple[str, str] | None:
    parts = module.split(".")
    base = Path(folder)
    for _ in range(PARENT_FOLDERS + 1):
        for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
            if candidate.is_file():
                return str(candidate), str(base)
        if base.parent == base:
            break
        base = base.parent
    return None


@functools.lru_cache(maxsize=64)
def _facts_of(path: str):
    """The lint facts of a project module, or None when it cannot be read or parsed (within the
    same bounds as a linted file: its size, and the parser's pathological inputs)."""
    source = read_source(Path(path), path, MAX_FILE_BYTES)
    if isinstance(source, Problem) or source.cells is not None:  # a notebook is not importable
        return None
    if slow_to_parse(source.text) is not None:
        return None
    try:
        return Facts(ast.parse(source.text), source.text, path=None)  # one call deep: its own calls are not followed
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


@functools.lru_cache(maxsize=256)
def _reads_in(path: str, function: str) -> tuple[int, str] | None:
    facts = _facts_of(path)
    scope = facts.model.module.functions.get(function) if facts is not None else None
    if scope is None or scope.kind != "function":
        return None
    from torchdoctor.lint.checks.sync import host_reads  # the sync check's own notion of a read (it imports this module)

    # Once per call, in the function's own body: a read inside a loop of the helper (a whole epoch's
    # loop) is that file's own finding, and the functions it defines run when they are called.
    inside = lambda block: block.scope is scope and next(enclosing_loops(block), None) is None  # noqa: E731
    first = min(((getattr(node, "lineno", 0), what) for node, _, what in host_reads(facts, inside)), default=None)
    return first
