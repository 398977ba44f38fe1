"""Planted TD402 (no-mixed-precision) and TD403 (no-tf32), GPU only: a matmul-heavy MLP
(six 2048x2048 layers, batch 512) trained in plain fp32 with no autocast, after TF32 was
explicitly switched off, so every matmul runs on the slow full-fp32 path.

Fix: run forward and loss under `torch.autocast("cuda", dtype=torch.bfloat16)`; at the
very least delete the allow_tf32 line (or `torch.set_float32_matmul_precision("high")`).
On a CPU the script runs a small model and batch, and there is nothing to measure.
"""
# torchdoctor-example: planted
# torchdoctor-requires: cuda
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = False  # expect: TD403
torch.manual_seed(0)
width, batch = (2048, 512) if device == "cuda" else (512, 8)  # CPU: just make it run
model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(6)]).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(50):
    x = torch.randn(batch, width, device=device)
    loss = model(x).square().mean()  # expect: TD402
    opt.zero_grad()
    loss.backward()
    opt.step()
