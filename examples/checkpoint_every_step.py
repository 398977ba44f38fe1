"""Planted: torch.save of model and optimizer state (~25 MB) every step (TD702).
Fix: save every N steps or by wall-clock time."""
# torchdoctor-example: planted
import os
import tempfile

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 1024))
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
ckpt_dir = tempfile.mkdtemp()
for step in range(60):
    x = torch.randn(32, 512)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, os.path.join(ckpt_dir, "last.pt"))  # expect: TD702
