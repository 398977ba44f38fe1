"""Everything the checks may ask about one parsed file, built once and shared by all checks.
The costlier analyses (where loaders go, what loops do with their batches) are built the first
time a check asks, so a file no check needs them for never pays for them."""

from __future__ import annotations

import ast
from functools import cached_property

from torchdoctor.lint.context import Context
from torchdoctor.lint.kinds import MODULE, Kinds
from torchdoctor.lint.model import FileModel
from torchdoctor.lint.values import Values


class Facts:
    def __init__(self, tree: ast.Module, text: str, path: str | None = None):
        self.path = path  # the file on disk, for the project modules it imports (None: not followed)
        self.model = FileModel(tree, text)
        self.imports = self.model.imports
        self.values = Values(self.model)
        self.kinds = Kinds(self.model, self.values)
        self.context = Context(self.model, self.kinds)
        self.values.context = self.context  # a parameter's value can now be read where the function is called
        self._handed: dict[int, set[str]] = {}

    def handed_to_modules(self, scope) -> set[str]:
        """Names `scope` passes as they are to a module (`model(x)`, `criterion(out, y)`), made
        the first time a scope is asked about."""
        key = id(scope)
        if key not in self._handed:
            names: set[str] = set()
            for call, _ in self.context.calls_in(scope):
                arguments = [a for a in (*call.args, *(k.value for k in call.keywords)) if isinstance(a, ast.Name)]
                if arguments and self.kinds.of(call.func, scope) == MODULE:
                    names.update(a.id for a in arguments)
            self._handed[key] = names
        return self._handed[key]

    def qualify(self, expr: ast.expr) -> str | None:
        return self.imports.qualify(expr)

    @cached_property
    def loaders(self):
        """Every torch DataLoader of the file and the loops that iterate it (`flow.LoaderFlow`)."""
        from torchdoctor.lint.flow import LoaderFlow

        return LoaderFlow(self)

    @cached_property
    def off_by_default(self):
        """The branches that do not run with every option at its default (`flags.OffByDefault`)."""
        from torchdoctor.lint.flags import OffByDefault

        return OffByDefault(self)

    @cached_property
    def batches(self):
        """The names holding each loop's batches and the copies that move them (`batches.Batches`)."""
        from torchdoctor.lint.batches import Batches

        return Batches(self)

    @cached_property
    def default_device_changed(self) -> bool:
        """The file moves the default device off the CPU (`host_tensors.default_device_changed`)."""
        from torchdoctor.lint.host_tensors import default_device_changed

        return default_device_changed(self)
