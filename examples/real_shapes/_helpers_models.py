"""Helper module of model_zoo_train.py (not an example of its own): a small model zoo
of the kind repositories accumulate, a registry `build_model(name)` plus legacy
utilities nobody calls any more. The legacy functions are full of slow habits, but the
training script never runs them: a diagnosis of that run must not report them.

Annotations here belong to model_zoo_train.py (see its `# torchdoctor-helpers:` line).
Every `# trap:` below is on a line that never executes in that run.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader


class MLP(nn.Module):
    def __init__(self, d_in: int, d_hidden: int, d_out: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, d_hidden), nn.ReLU(), nn.Linear(d_hidden, d_hidden), nn.ReLU(),
                                 nn.Linear(d_hidden, d_out))

    def forward(self, x):
        return self.net(x)


class LegacyAttentionPool(nn.Module):
    """An old pooling head that loops over the heads in Python (never built by the script)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.query = nn.Parameter(torch.randn(heads, dim // heads))

    def forward(self, x):
        b, t, d = x.shape
        parts = x.view(b, t, self.heads, d // self.heads)
        pooled = []
        for h in range(self.heads):
            weights = torch.softmax(parts[:, :, h] @ self.query[h], dim=1)
            pooled.append((weights.unsqueeze(-1) * parts[:, :, h]).sum(1))  # trap: TD301
        if torch.isnan(pooled[0]).any():  # trap: TD201, TD202
            print("nan in pooling")
        return torch.cat(pooled, dim=-1)


MODELS = {"mlp": MLP}


def build_model(name: str, **kwargs) -> nn.Module:
    return MODELS[name](**kwargs)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def legacy_train(model, dataset, epochs: int = 10, lr: float = 1e-3):
    """The repository's first training loop, kept "for reference"; nothing calls it."""
    opt = torch.optim.Adam(model.parameters(), lr=lr, foreach=False)  # trap: TD302
    for epoch in range(epochs):
        loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=2)  # trap: TD102
        for x, y in loader:
            x, y = x.cuda(), y.cuda()  # trap: TD103, TD104
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=False)  # trap: TD303
            loss.backward()
            opt.step()
            torch.cuda.synchronize()  # trap: TD204
            print(f"epoch {epoch} loss {loss}")  # trap: TD201, TD703
            torch.save(model.state_dict(), "legacy.pt")  # trap: TD702


def legacy_evaluate(model, loader):
    correct = 0
    for x, y in loader:
        pred = model(x.cuda()).argmax(1)
        correct += (pred.cpu() == y).sum().item()  # trap: TD201, TD203
    return correct / len(loader.dataset)
