"""Planted TD204 (explicit-sync, GPU only): `torch.cuda.synchronize()` after every step
to "time" it with time.time(): the host waits for the GPU to drain each step, so the next
step's kernels are never queued while the GPU works.

Fix: drop the synchronize; time with CUDA events
(`torch.cuda.Event(enable_timing=True)`) read every N steps, or use the steps/s over many
steps. On a CPU-only machine the guarded call never runs.
"""
# torchdoctor-example: planted
# torchdoctor-requires: cuda
import time

import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
step_times = []
for step in range(60):
    t0 = time.time()
    x = torch.randn(128, 1024, device=device)
    y = torch.randint(0, 10, (128,), device=device)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()  # expect: TD204
    step_times.append(time.time() - t0)
print(f"mean step {1000 * sum(step_times[5:]) / len(step_times[5:]):.2f} ms")
