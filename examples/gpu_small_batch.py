"""Planted TD401 (small-batch) and TD501 (memory-headroom), GPU only: batch size 4 for
an MLP that could take 256+: each matmul is a few hundred kFLOPs, per-op overhead
dominates and almost all of the GPU's memory stays unused.

Fix: `DataLoader(..., batch_size=256)` (scale the learning rate with the batch).
On a CPU-only machine the script runs, but the rules are judged on a GPU only.
"""
# torchdoctor-example: planted
# torchdoctor-requires: cuda
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
data = TensorDataset(torch.randn(4096, 128), torch.randint(0, 10, (4096,)))
loader = DataLoader(data, batch_size=4, shuffle=True)  # expect: TD401, TD501  # lint-expect: TD103
model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step, (x, y) in enumerate(loader):
    if step == args.steps:
        break
    x, y = x.to(device), y.to(device)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
