"""Planted: a Dataset whose __getitem__ builds features in Python, loaded with
num_workers=0, so every step waits for its batch (TD101). Fix: num_workers>0, or
pre-compute the features once."""
# torchdoctor-example: planted
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class FeatureDataset(Dataset):
    def __init__(self, n=4096, dim=64):
        g = torch.Generator().manual_seed(0)
        self.raw = torch.randn(n, dim, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.raw)

    def __getitem__(self, i):
        row = self.raw[i].tolist()
        feats = [sum(row[max(0, k - 4):k + 1]) / 5.0 for k in range(len(row))]  # slow per-sample work
        return torch.tensor(feats), self.labels[i]


model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
loader = DataLoader(FeatureDataset(), batch_size=64, shuffle=True)  # expect: TD101
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
