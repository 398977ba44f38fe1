"""Planted TD104 (blocking-transfer, GPU only): batches are pinned by the DataLoader, but
the image batch is copied with a plain `x.to(device)`: the host waits for each 6 MB copy
instead of queuing it and moving on, so copy and compute never overlap.

Fix: `x = x.to(device, non_blocking=True)` (safe from pinned memory).
On a CPU-only machine the script runs, but there is nothing to measure.
"""
# torchdoctor-example: planted
# torchdoctor-requires: cuda
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
data = TensorDataset(torch.randn(6144, 3, 64, 64), torch.randint(0, 10, (6144,)))
loader = DataLoader(data, batch_size=128, shuffle=True, num_workers=2, pin_memory=device == "cuda")
model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 64 * 64, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for epoch in range(1):
    for x, y in loader:
        x = x.to(device)  # expect: TD104
        y = y.to(device, non_blocking=True)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
