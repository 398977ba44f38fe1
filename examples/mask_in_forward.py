"""Planted TD202 (data-dependent-sync): the model's forward selects the observed targets
with a boolean mask, `err[mask]`, every step. The result's size depends on the mask's
values, so on a GPU the host must wait for the device to count them before it can go on.

Fix: keep shapes fixed and weight by the mask instead of selecting:
`(err * mask).sum() / mask.sum().clamp(min=1)`.
"""
# torchdoctor-example: planted
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"


class MaskedRegressor(nn.Module):
    """Predicts 32 sensor values; only the observed ones (mask True) count in the loss."""

    def __init__(self, dim=64, outputs=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 256), nn.Tanh(), nn.Linear(256, outputs))

    def forward(self, x, target, observed):
        err = (self.net(x) - target) ** 2
        return err[observed].mean()  # expect: TD202


torch.manual_seed(0)
model = MaskedRegressor().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(60):
    x = torch.randn(256, 64, device=device)
    target = torch.randn(256, 32, device=device)
    observed = torch.rand(256, 32, device=device) > 0.3
    loss = model(x, target, observed)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 20 == 19:
        print(f"step {step + 1} loss {loss.item():.4f}")
