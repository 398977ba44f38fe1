"""Planted TD101 (dataloader-stall): the Dataset builds each sample's features in a Python
loop inside `__getitem__`, and the DataLoader runs it in the main process
(num_workers=0), so every training step first waits for its batch.

Fix: compute the features once, vectorized, before training (or at least load with
`num_workers=2..8, persistent_workers=True` so workers prepare batches while the model
trains).
"""
# torchdoctor-example: planted
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

device = "cuda" if torch.cuda.is_available() else "cpu"


class RollingFeatureDataset(Dataset):
    """Raw 64-value signals; features are 5-wide rolling means, computed per sample."""

    def __init__(self, n=4096, dim=64, window=5):
        g = torch.Generator().manual_seed(0)
        self.raw = torch.randn(n, dim, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        self.window = window

    def __len__(self):
        return len(self.raw)

    def __getitem__(self, idx):
        row = self.raw[idx].tolist()
        feats = []
        for k in range(len(row)):
            lo = max(0, k - self.window + 1)
            feats.append(sum(row[lo:k + 1]) / self.window)
        return torch.tensor(feats), self.labels[idx]


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loader = DataLoader(RollingFeatureDataset(), batch_size=64, shuffle=True)  # expect: TD101  # lint-expect: TD105, TD103

for epoch in range(1):
    total = torch.zeros((), device=device)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.detach()
    print(f"epoch {epoch} mean loss {total.item() / len(loader):.4f}")
