"""Workload for benchmarks/overhead.py: a small MLP trained from a DataLoader; it times each
of its own steps and writes them to the JSON file named by argv[1]. argv[2] is the device
(cpu by default; cuda copies each batch from pinned memory without blocking)."""
import json
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
torch.manual_seed(0)
torch.set_num_threads(1)  # steadier timings on a shared 2-core machine
loader = DataLoader(TensorDataset(torch.randn(8192, 256), torch.randint(0, 10, (8192,))), batch_size=64,
                    pin_memory=device == "cuda")
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
times, last = [], time.perf_counter()
try:
    for x, y in [batch for _ in range(2) for batch in loader]:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        now = time.perf_counter()
        times.append(now - last)
        last = now
finally:
    with open(sys.argv[1], "w") as fh:
        json.dump(times, fh)
