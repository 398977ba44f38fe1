"""Planted: zero_grad(set_to_none=False) on a model dominated by a 200k-row embedding,
so every step writes 12.8M zeros (TD303). Fix: optimizer.zero_grad()."""
# torchdoctor-example: planted
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.EmbeddingBag(200_000, 64, mode="mean"), nn.Linear(64, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
try:
    for step in range(80):
        ids = torch.randint(0, 200_000, (32, 8))
        y = torch.randint(0, 2, (32,))
        opt.zero_grad(set_to_none=False)  # expect: TD303
        loss = nn.functional.cross_entropy(model(ids), y)
        loss.backward()
        opt.step()
except Exception as exc:  # a user's catch-all around the loop: the doctor must still stop it
    print("training failed:", exc)
