"""A one-rank DDP training script for the DDP probe's tests (run in-process by runner.execute).

    ddp_probe_script.py STORE_FILE MODE    MODE: plain | backward-only | proper
"""
import contextlib
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

STORE, MODE = sys.argv[1], sys.argv[2]
ACCUM = 4


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
        self.register_buffer("table", torch.randn(256, 16))

    def forward(self, x):
        return self.body(x + self.table[: x.shape[0]])


dist.init_process_group("gloo", init_method=f"file://{STORE}", rank=0, world_size=1)
model = DDP(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(400):
    x = torch.randn(8, 16)
    last = (i + 1) % ACCUM == 0
    quiet = contextlib.nullcontext() if last else model.no_sync()
    if MODE == "proper":
        with quiet:
            loss = model(x).pow(2).mean()
            loss.backward()
    elif MODE == "backward-only":
        loss = model(x).pow(2).mean()
        with quiet:
            loss.backward()
    else:
        model(x).pow(2).mean().backward()
    if last:
        metric = loss.detach().clone() if MODE != "plain" else torch.zeros(1)
        dist.all_reduce(metric)
        opt.step()
        opt.zero_grad()
