"""Overhead workload (benchmarks/overhead.py): the synthetic one, a small MLP trained from
a DataLoader over in-memory tensors with AdamW. It times each of its own steps
(_steptimes.py) and writes them to the JSON file named by argv[1]; argv[2] is the number
of steps to run, argv[3] the device (cpu by default; on cuda each batch is copied from
pinned memory without blocking); argv[4] `compile`: the model under torch.compile (Inductor; C++ on
a CPU), the compile probe then on every step (overhead.py's compiled_mlp)."""
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from _steptimes import StepTimes

torch.manual_seed(0)
torch.set_num_threads(1)  # steadier timings on a shared 2-core machine
n_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 256
device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
loader = DataLoader(TensorDataset(torch.randn(8192, 256), torch.randint(0, 10, (8192,))), batch_size=64,
                    pin_memory=device == "cuda")
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
if sys.argv[4:5] == ["compile"]:
    model = torch.compile(model)  # 8192 rows in batches of 64: one shape, no recompile at an epoch's end
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
clock = StepTimes(sys.argv[1])
try:
    while len(clock) < n_steps:
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            clock.tick()
            if len(clock) >= n_steps:
                break
finally:
    clock.write()
