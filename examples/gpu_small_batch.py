"""Planted (GPU): batch size 4 for a model that could take 256: tiny kernels, most of
the GPU and its memory idle (TD401, TD501). Fix: a larger batch (scale the LR)."""
# torchdoctor-example: planted
# torchdoctor-requires: cuda
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
data = TensorDataset(torch.randn(4096, 128), torch.randint(0, 10, (4096,)))
loader = DataLoader(data, batch_size=4, shuffle=True)  # expect: TD401, TD501
model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    x, y = x.to(device), y.to(device)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
