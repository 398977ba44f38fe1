"""Overhead workload (benchmarks/overhead.py): the null step. A DataLoader over a tiny
in-memory dataset, a one-parameter model, `backward()` and an SGD `step()`: almost no work,
so the step time is the Python and hook cost of a training step, and any time the doctor's
per-step hooks add (optimizer, backward, loader `next()`, zero_grad) shows in full. It times
each of its own steps (_steptimes.py) and writes them to the JSON file named by argv[1];
argv[2] is the number of steps to run."""
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from _steptimes import StepTimes

torch.manual_seed(0)
torch.set_num_threads(1)
n_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
loader = DataLoader(TensorDataset(torch.randn(4096, 1)), batch_size=1)
weight = torch.nn.Parameter(torch.ones(1))
opt = torch.optim.SGD([weight], lr=1e-6)
clock = StepTimes(sys.argv[1])
try:
    while len(clock) < n_steps:
        for (x,) in loader:
            loss = (weight * x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            clock.tick()
            if len(clock) >= n_steps:
                break
finally:
    clock.write()
