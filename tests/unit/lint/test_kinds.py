"""Tensor-ness inference: what a sync check may assume about an expression."""

import ast
import textwrap

from torchdoctor.lint.facts import Facts


def kinds(source: str, function: str | None = None) -> dict[str, str | None]:
    """Kind of every name assigned (or a parameter) in `function` (or the module)."""
    source = textwrap.dedent(source).lstrip("\n")
    facts = Facts(ast.parse(source), source)
    scope = next(s for s in facts.model.scopes if s.name == (function or "<module>"))
    names = {n.id for t, _, _ in scope.assigns for n in ast.walk(t) if isinstance(n, ast.Name)} | set(scope.params)
    return {name: facts.kinds.name(name, scope) for name in sorted(names)}


def test_assignments_from_models_losses_and_torch_functions_are_tensors():
    found = kinds("""
        import torch
        from torch import nn
        from torch.utils.data import DataLoader
        model = nn.Linear(2, 2)
        criterion = nn.CrossEntropyLoss()
        loader = DataLoader(ds)
        out = model(x)
        loss = criterion(out, y)
        mask = out > 0
        both = mask & (out < 1)
        count = 0
        count += 1
        total = 0.0
        total += loss.item()
        acc = 0
        acc += (out.argmax(1) == y).sum()
        shape = out.shape
        n = out.size(0)
        cpu_flag = torch.cuda.is_available()
    """)
    assert found["model"] == "module" and found["criterion"] == "module" and found["loader"] == "loader"
    assert found["out"] == "tensor" and found["loss"] == "tensor" and found["acc"] == "tensor"
    assert found["mask"] == "bool" and found["both"] == "bool"
    assert found["count"] == "other" and found["total"] == "other" and found["shape"] == "other"
    assert found["n"] == "other" and found["cpu_flag"] == "other"


def test_batches_from_a_loader_are_tensors_but_indices_are_not():
    found = kinds("""
        from torch.utils.data import DataLoader
        loader = DataLoader(ds)
        for i, (x, y) in enumerate(loader):
            pass
        for a, b in zip(loader, other):
            pass
    """)
    assert found["x"] == "tensor" and found["y"] == "tensor" and found["i"] is None
    assert found["a"] == "tensor" and found["b"] is None


def test_forward_parameters_follow_annotations_defaults_and_call_sites():
    source = """
        import torch
        from torch import nn
        class Net(nn.Module):
            def forward(self, x, mask, flag: bool, scale=2.0, extra=None, w: torch.Tensor = None):
                return x
        net = Net()
        out = net(torch.randn(2), torch.rand(2) > 0.5, True)
    """
    found = kinds(source, "forward")
    assert found["x"] == "tensor" and found["mask"] == "bool" and found["flag"] == "other"
    assert found["scale"] == "other" and found["extra"] is None and found["w"] == "tensor"


def test_a_container_of_tensors_is_not_a_tensor():
    found = kinds("""
        from typing import Optional
        import torch
        from torch import Tensor
        def f(args: list[torch.Tensor], pair: Optional[tuple[Tensor, Tensor]], maybe: "Sequence[Tensor] | None",
              x: Tensor, y: Optional[Tensor], z: Tensor | None):
            pass
    """, "f")
    assert found["args"] == "other" and found["pair"] == "other" and found["maybe"] == "other"
    assert found["x"] == "tensor" and found["y"] == "tensor" and found["z"] == "tensor"


def test_autograd_function_forward_parameters_are_not_assumed_tensors():
    found = kinds("""
        import torch
        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, dim):
                return x
    """, "forward")
    assert found["dim"] is None


def test_recursive_functions_do_not_loop_forever():
    found = kinds("""
        def f(n):
            return f(n - 1)
        r = f(3)
    """)
    assert found["r"] is None


def test_an_attribute_the_class_assigns_is_what_it_assigned_not_what_its_name_suggests():
    # `self.T` of a token loader is a sequence length, not a transpose; `self.weight` set to a
    # number is a number; `x.T` of a tensor stays a tensor
    found = kinds("""
        import torch
        class Tokens:
            def __init__(self, B, T):
                self.B, self.T, self.weight = B, T, 0.5
                self.T = T
                self.weight = 0.5
            def next_batch(self):
                end = self.B * self.T + 1
                w = self.weight
                x = torch.randn(3, 3)
                xt = x.T
    """, "next_batch")
    assert found["end"] is None and found["w"] == "other" and found["xt"] == "tensor"


def test_a_conditional_expression_has_the_kinds_of_its_branches():
    found = kinds("""
        import torch
        train = torch.arange(10)
        val = torch.arange(5)
        data = train if split == "train" else val
        n = 3 if fast else 5
    """)
    assert found["data"] == "tensor" and found["n"] == "other"
