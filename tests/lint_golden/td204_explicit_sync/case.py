"""TD204: explicit synchronization in loops, CUDA_LAUNCH_BLOCKING set in code."""
import os
import time

import torch

os.environ["CUDA_LAUNCH_BLOCKING"] = "1"  # triggers
os.environ.setdefault("CUDA_LAUNCH_BLOCKING", "1")  # triggers
os.environ["CUDA_LAUNCH_BLOCKING"] = "0"  # no finding
os.environ["CUDA_VISIBLE_DEVICES"] = "0"  # no finding

model = torch.nn.Linear(8, 8).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    t0 = time.time()
    model(torch.randn(4, 8, device="cuda")).sum().backward()
    opt.step()
    torch.cuda.synchronize()  # triggers
    if step % 50 == 0:
        torch.cuda.synchronize()  # no finding: every 50 steps, to time them
        print(time.time() - t0)

for chunk in range(10):
    torch.cuda.empty_cache()  # low: a loop, not a training loop
torch.cuda.synchronize()  # no finding: once
