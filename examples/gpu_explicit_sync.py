"""Planted (GPU): torch.cuda.synchronize() every step to "time" it (TD204).
Fix: time with CUDA events; never synchronize in the loop."""
# torchdoctor-example: planted
# torchdoctor-requires: cuda
import time

import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024)).to(device)
opt = torch.optim.Adam(model.parameters())
for step in range(60):
    t0 = time.time()
    loss = model(torch.randn(256, 1024, device=device)).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()  # expect: TD204
    step_time = time.time() - t0
