"""A small training script the knob tests run under the doctor. It writes what it saw (the
final parameters, the batches it got, optimizer settings, dtypes) to the JSON file named by
its first argument, so tests can check that a knob took effect and what it left unchanged."""

import json
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

OUT = sys.argv[1]
CONV = "--conv" in sys.argv
torch.manual_seed(0)


class Indexed(Dataset):
    """Sample i is a fixed random vector with label i, so a test can see which batches came."""

    def __init__(self, n):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 3, 8, 8, generator=g) if CONV else torch.randn(n, 16, generator=g)
        self.y = torch.arange(n)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = (nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(144, 4)) if CONV
                     else nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
        self.seen_dtype = None

    def forward(self, x):
        out = self.body(x)
        self.seen_dtype = str(out.dtype)
        return out


model = Net()
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
train = DataLoader(Indexed(64), batch_size=8, shuffle=True)
val = DataLoader(Indexed(32), batch_size=8)
seen, eval_labels, grads_none_after_zero = [], [], []
try:  # `finally`: a run the doctor stops after N steps still reports what it saw
    for epoch in range(3):
        model.train()
        for x, y in train:
            seen.append(y.tolist())
            loss = nn.functional.cross_entropy(model(x).float(), y % 4)
            opt.zero_grad(set_to_none=False)
            grads_none_after_zero.append(all(p.grad is None for p in model.parameters()))
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            eval_labels.append([y.tolist() for _, y in val])
        torch.save(model.state_dict(), os.path.join(os.path.dirname(OUT), f"ckpt{epoch}.pt"))
finally:
    with open(OUT, "w") as f:
        json.dump({
            "params": [p.detach().double().sum().item() for p in model.parameters()],
            "seen": seen,
            "eval_labels": eval_labels,
            "grads_none_after_zero": grads_none_after_zero,
            "foreach": opt.param_groups[0]["foreach"],
            "fused": opt.param_groups[0]["fused"],
            "dtype": model.seen_dtype,
            "channels_last": (model.body[0].weight.is_contiguous(memory_format=torch.channels_last) if CONV else None),
        }, f)
