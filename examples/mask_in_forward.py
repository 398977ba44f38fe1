"""Planted: boolean-mask indexing in forward() every step (TD202): on a GPU the host
waits for the mask's count. Fix: multiply by the mask instead of selecting."""
# torchdoctor-example: planted
import torch
from torch import nn


class MaskedRegressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))

    def forward(self, x, mask):
        out = self.net(x).squeeze(-1)
        return out[mask]  # expect: TD202


torch.manual_seed(0)
model = MaskedRegressor()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(60):
    x, y = torch.randn(256, 16), torch.randn(256)
    mask = y > 0
    loss = ((model(x, mask) - y[mask]) ** 2).mean()  # expect: TD202
    opt.zero_grad()
    loss.backward()
    opt.step()
