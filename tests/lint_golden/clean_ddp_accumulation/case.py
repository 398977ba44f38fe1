"""Clean: gradient accumulation on DDP that skips the all-reduce with no_sync()."""
import contextlib

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(torch.nn.Linear(16, 16).cuda(), device_ids=[0])
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
accum_steps = 8
for i, (x, y) in enumerate(loader):
    sync = (i + 1) % accum_steps == 0
    with contextlib.nullcontext() if sync else model.no_sync():
        (torch.nn.functional.mse_loss(model(x), y) / accum_steps).backward()
    if sync:
        opt.step()
        opt.zero_grad()
