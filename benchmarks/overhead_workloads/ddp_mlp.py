"""Overhead workload (benchmarks/overhead.py) with 2 ranks: an MLP wrapped in
DistributedDataParallel (gloo), a DistributedSampler, AdamW, one all-reduce per step. Each
rank times its own steps (_steptimes.py) into argv[1] (a file of its own; rank 0's are
compared); argv[2] is the number of steps. The process group is made once per rank process and reused by every
plain and doctor run of the benchmark."""
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from _steptimes import StepTimes

torch.manual_seed(0)
torch.set_num_threads(1)
n_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 256
if not dist.is_initialized():
    dist.init_process_group("gloo")
data = TensorDataset(torch.randn(8192, 256), torch.randint(0, 10, (8192,)))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=64, sampler=sampler)
model = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
clock = StepTimes(sys.argv[1])
epoch = 0
try:
    while len(clock) < n_steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            clock.tick()
            if len(clock) >= n_steps:
                break
        epoch += 1
finally:
    clock.write()
