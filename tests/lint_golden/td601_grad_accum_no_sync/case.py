"""TD601: gradient accumulation on a DDP model, all-reducing on every micro-batch."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
model = DDP(torch.nn.Linear(16, 16).cuda(), device_ids=[0])
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
accum_steps = 8
for i, (x, y) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(x), y) / accum_steps
    loss.backward()  # triggers: every micro-batch all-reduces
    if (i + 1) % accum_steps == 0:
        opt.step()
        opt.zero_grad()
