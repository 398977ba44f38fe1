"""Planted (GPU): pinned batches copied without non_blocking=True (TD104).
Fix: x.to(device, non_blocking=True)."""
# torchdoctor-example: planted
# torchdoctor-requires: cuda
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
data = TensorDataset(torch.randn(8192, 3, 64, 64), torch.randint(0, 10, (8192,)))
loader = DataLoader(data, batch_size=128, shuffle=True, pin_memory=device == "cuda")
model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 64 * 64, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    x = x.to(device)  # expect: TD104
    y = y.to(device, non_blocking=True)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
