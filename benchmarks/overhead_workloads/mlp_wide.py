"""Overhead workload (benchmarks/overhead.py): an MLP whose width sets the step time (argv[3],
default 640: ~10 ms a step on one core of the benchmark machine; 1600: ~50 ms), batch 128,
AdamW, a DataLoader over in-memory tensors. It times each of its own steps (_steptimes.py)
and writes them to the JSON file named by argv[1]; argv[2] is the number of steps to run."""
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from _steptimes import StepTimes

torch.manual_seed(0)
torch.set_num_threads(1)
n_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 64
width = int(sys.argv[3]) if len(sys.argv) > 3 else 640
loader = DataLoader(TensorDataset(torch.randn(4096, 512), torch.randint(0, 10, (4096,))), batch_size=128)
model = nn.Sequential(nn.Linear(512, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
clock = StepTimes(sys.argv[1])
try:
    while len(clock) < n_steps:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            clock.tick()
            if len(clock) >= n_steps:
                break
finally:
    clock.write()
