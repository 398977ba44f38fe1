"""Planted TD406 (graph break): a compiled loss that normalises by the target's largest value
read with `.item()`. Dynamo cannot keep a host read inside the graph: it ends the graph at that
line, runs it in Python (on a GPU the host waits for the device there every step), and starts a
second graph after it.

Fix: keep the scale a tensor (`scale = target.abs().amax()`): one graph, no host read.
"""
# torchdoctor-example: planted
import argparse

import torch
from torch import nn


@torch.compile
def normalized_mse(pred, target):
    scale = target.abs().amax().item()  # expect: TD406
    return ((pred - target) / (scale + 1e-6)).pow(2).mean()


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(0)
for step in range(args.steps):
    x = torch.randn(args.batch_size, 16, generator=gen)
    y = torch.randn(args.batch_size, 4, generator=gen)
    loss = normalized_mse(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("done")
