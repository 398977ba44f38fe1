"""Hand-fixed version of slow_storage.py (the reference for `benchmarks/tune_accuracy.py`).

Planted TD101 (dataloader-stall), waiting rather than computing: every sample is read
from slow storage (a 1 ms wait per record stands in for a network file system or an
object store), and the DataLoader reads in the main process (num_workers=0), so each step
first waits for 16 reads in a row.

Unlike slow_dataset.py, loading here barely uses the CPU, so worker processes overlap the
reads even on a 2-core machine: `torchdoctor run` measures the CPU share of the wait and
estimates with the fix's 4 workers.

Fix: `DataLoader(..., num_workers=4, persistent_workers=True)`.
"""
# torchdoctor-example: fixed
# torchdoctor-fixes: slow_storage.py
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

device = "cuda" if torch.cuda.is_available() else "cpu"


class RecordStore(Dataset):
    """2048 records of 64 values; reading one costs a storage round trip."""

    READ_LATENCY_S = 0.001

    def __init__(self, n=2048, dim=64):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, idx):
        time.sleep(self.READ_LATENCY_S)
        return self.x[idx], self.y[idx]


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loader = DataLoader(RecordStore(), batch_size=16, shuffle=True, num_workers=4, persistent_workers=True)

for epoch in range(2):
    total = torch.zeros((), device=device)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.detach()
    print(f"epoch {epoch} mean loss {total.item() / len(loader):.4f}")
