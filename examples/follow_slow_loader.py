"""Planted for `torchdoctor run --follow`: the data loading slows down halfway through the run.

For its first 300 steps each batch is ready at once; from step 301 every sample's `__getitem__`
waits on "storage" (a short sleep standing for a shard on a slow network disk), and the loader
runs in the training process (num_workers=0), so every step waits for its batch from there on.

    torchdoctor run --follow examples/follow_slow_loader.py     # finds the change at step ~300, cause at the loader

Fix: load with workers that prefetch (`num_workers=4, persistent_workers=True`), or move the slow
shard to faster storage.
"""
# torchdoctor-example: planted
# torchdoctor-follow: the change is found by `run --follow` (the accuracy benchmark runs it so)
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 600
SLOW_FROM_STEP = 301
BATCH = 64


class ShardedDataset(Dataset):
    def __init__(self, n, dim=256):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, idx):
        if idx >= (SLOW_FROM_STEP - 1) * BATCH:  # the second shard lives on slow storage
            time.sleep(0.0001)
        return self.x[idx], self.y[idx]


torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
loader = DataLoader(ShardedDataset(STEPS * BATCH), batch_size=BATCH)  # expect: TD902, TD101  # lint-expect: TD105

for x, y in loader:
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.4f}")
