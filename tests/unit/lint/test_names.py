import ast

from torchdoctor.lint.names import Imports, canonical


def qualify(source: str, expr: str) -> str | None:
    imports = Imports()
    for node in ast.parse(source).body:
        imports.add(node)
    return imports.qualify(ast.parse(expr, mode="eval").body)


def test_aliases_resolve_to_the_public_torch_name():
    assert qualify("from torch.utils.data import DataLoader as DL", "DL") == "torch.utils.data.DataLoader"
    assert qualify("from torch import nn", "nn.DataParallel") == "torch.nn.DataParallel"
    assert qualify("import torch.nn as nn", "nn.parallel.DataParallel") == "torch.nn.DataParallel"
    assert qualify("import torch", "torch.utils.data.dataloader.DataLoader") == "torch.utils.data.DataLoader"
    assert qualify("from torch.optim import adamw", "adamw.AdamW") == "torch.optim.AdamW"


def test_names_nobody_imported_stay_unresolved():
    assert qualify("", "DataLoader") is None
    assert qualify("from mylib import DataLoader", "DataLoader") == "mylib.DataLoader"
    assert qualify("from .loaders import DataLoader", "DataLoader") is None  # the user's own module
    assert qualify("import torch", "f().DataLoader") is None


def test_star_imports_cover_capitalized_names_only():
    assert qualify("from torch.utils.data import *", "DataLoader") == "torch.utils.data.DataLoader"
    assert qualify("from torch.utils.data import *", "loader") is None


def test_canonical_leaves_public_names_alone():
    assert canonical("torch.optim.AdamW") == "torch.optim.AdamW"
    assert canonical("torch.optim.lr_scheduler.StepLR") == "torch.optim.lr_scheduler.StepLR"
