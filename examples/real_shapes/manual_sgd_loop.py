"""Imitates a from-scratch training loop of the kind tutorials and small research
scripts write before reaching for `torch.optim`: a deep residual MLP, the loss computed
by hand, `loss.backward()`, then every parameter updated in a Python loop
`for p in model.parameters(): p.data.add_(p.grad, alpha=-lr)` and the gradients cleared
with `model.zero_grad()`. There is no optimizer object, so no `optimizer.step()` ever
runs: a step is the interval between two `backward()` calls.

Planted: the per-parameter update loop (TD305): 16 blocks give 98 parameter tensors,
each updated by its own kernel and Python iteration; `torch.optim.SGD(..., foreach=True)`
(or `fused=True`) updates them in a few multi-tensor kernels.

Traps: the loss is read for a print every 20 steps only.
"""
# torchdoctor-example: planted
import argparse

import torch
from torch import nn


class ResidualMLP(nn.Module):
    def __init__(self, dim: int, depth: int, n_out: int):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim)) for _ in range(depth))
        self.out = nn.Linear(dim, n_out)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.out(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--depth", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--iters", type=int, default=80)
    parser.add_argument("--print-every", type=int, default=20)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    teacher = torch.randn(args.dim, 4)
    inputs = torch.randn(4096, args.dim)
    targets = (inputs @ teacher).tanh()
    model = ResidualMLP(args.dim, args.depth, 4).to(device)

    for it in range(args.iters):
        rows = torch.randint(0, len(inputs), (args.batch_size,))
        x, y = inputs[rows].to(device), targets[rows].to(device)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                # 98 tensors, one small kernel each plus a Python iteration: on a GPU ~100
                # launches (a quarter or more of this launch-bound step) where a foreach or
                # fused optimizer issues a handful. On this CPU (1 thread) the loop took
                # ~0.34 ms of a ~4.4 ms step (~8 %), a foreach SGD step 0.17 ms.
                p.data.add_(p.grad, alpha=-args.lr)  # expect: TD305
        model.zero_grad()
        if it % args.print_every == 0:
            # One read every 20 steps.
            print(f"iter {it}: loss {loss.item():.5f}")  # trap: TD201


if __name__ == "__main__":
    main()
