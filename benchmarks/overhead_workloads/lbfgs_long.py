"""Overhead workload (benchmarks/overhead.py): long steps from a closure optimizer. LBFGS with
`max_iter=20` evaluates its closure (forward, backward) up to 20 times in every `step()`, so a
step is ~20 ordinary steps long: the probes that stop after one closure evaluation (memory
accounting) or at their budget keep the first step near its plain length. An MLP 128-256-256-1
regressing a smooth function, full batch of 256 rows, history 10 (steady step times). It times each of its own steps
(_steptimes.py) and writes them to the JSON file named by argv[1]; argv[2] is the number of
steps to run."""
import sys

import torch
from torch import nn

from _steptimes import StepTimes

torch.manual_seed(0)
torch.set_num_threads(1)
n_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
x = torch.randn(256, 128)
y = torch.sin(x[:, :1] * 2.0) + 0.1 * x[:, 1:2]
model = nn.Sequential(nn.Linear(128, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1))
# line_search_fn=None and tolerances at 0: every step evaluates the closure max_iter times
opt = torch.optim.LBFGS(model.parameters(), lr=0.05, max_iter=20, history_size=10, tolerance_grad=0.0,
                        tolerance_change=0.0)
clock = StepTimes(sys.argv[1])


def closure():
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


try:
    while len(clock) < n_steps:
        opt.step(closure)
        clock.tick()
finally:
    clock.write()
