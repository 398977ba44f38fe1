"""Hand-fixed version of slow_dataset.py (the reference for `benchmarks/tune_accuracy.py`).

Planted TD101 (dataloader-stall): the Dataset builds each sample's features in a Python
loop inside `__getitem__`, and the DataLoader runs it in the main process
(num_workers=0), so every training step first waits for its batch.

The fix applied here is the one that works on any machine: the rolling means are computed
once, vectorized, when the dataset is built, so `__getitem__` only indexes. Worker
processes (`num_workers=2..8`) also hide the loop, but only where spare cores can run them:
on a 2-core CPU run the model's threads already use both, and `torchdoctor tune` measures
that workers do not help there.
"""
# torchdoctor-example: fixed
# torchdoctor-fixes: slow_dataset.py
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

device = "cuda" if torch.cuda.is_available() else "cpu"


class RollingFeatureDataset(Dataset):
    """Raw 64-value signals; features are 5-wide rolling means, computed once for all samples."""

    def __init__(self, n=4096, dim=64, window=5):
        g = torch.Generator().manual_seed(0)
        self.raw = torch.randn(n, dim, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        # the same means as the per-sample loop: zeros before the first value, divided by window
        padded = F.pad(self.raw, (window - 1, 0))
        self.features = padded.unfold(1, window, 1).sum(-1) / window

    def __len__(self):
        return len(self.raw)

    def __getitem__(self, idx):
        return self.features[idx], self.labels[idx]


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loader = DataLoader(RollingFeatureDataset(), batch_size=64, shuffle=True)

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
