"""Planted (GPU): a matmul-heavy MLP trained in fp32 with TF32 explicitly disabled
(TD402, TD403). Fix: autocast to bf16, or at least set_float32_matmul_precision("high")."""
# torchdoctor-example: planted
# torchdoctor-requires: cuda
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = False  # expect: TD403
model = nn.Sequential(*[nn.Sequential(nn.Linear(2048, 2048), nn.GELU()) for _ in range(6)]).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
batch = 512 if device == "cuda" else 8
for step in range(60):
    x = torch.randn(batch, 2048, device=device)
    loss = model(x).square().mean()  # expect: TD402
    opt.zero_grad()
    loss.backward()
    opt.step()
