"""Planted: printing whole tensors every step (TD703, and TD201 since formatting a
tensor reads it on the host). Fix: log a float every N steps."""
# torchdoctor-example: planted
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(32, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(100):
    x, y = torch.randn(64, 32), torch.randn(64, 8)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss} weight grad {model.weight.grad}")  # expect: TD703, TD201
