"""Everything the checks may ask about one parsed file, built once and shared by all checks."""

from __future__ import annotations

import ast

from torchdoctor.lint.context import Context
from torchdoctor.lint.kinds import Kinds
from torchdoctor.lint.model import FileModel
from torchdoctor.lint.values import Values


class Facts:
    def __init__(self, tree: ast.Module, text: str):
        self.model = FileModel(tree, text)
        self.imports = self.model.imports
        self.values = Values(self.model)
        self.kinds = Kinds(self.model, self.values)
        self.context = Context(self.model, self.kinds)

    def qualify(self, expr: ast.expr) -> str | None:
        return self.imports.qualify(expr)
