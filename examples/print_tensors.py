"""Planted TD703 (logging-overhead, and TD201 host-sync since formatting a tensor reads it
on the host): every step prints the loss tensor and a whole gradient tensor.

Fix: log a Python float every N steps:
`if step % 50 == 0: print(f"step {step} loss {loss.item():.4f}")`.
"""
# torchdoctor-example: planted
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU())
        self.fc = nn.Linear(64, 8)

    def forward(self, x):
        return self.fc(self.body(x))


torch.manual_seed(0)
model = Regressor().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(100):
    x, y = torch.randn(64, 32, device=device), torch.randn(64, 8, device=device)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {i} loss {loss} grad {model.fc.weight.grad}")  # expect: TD703, TD201
