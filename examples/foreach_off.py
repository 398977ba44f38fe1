"""Planted: AdamW(foreach=False) over a deep stack of small blocks (120 parameter
tensors) updates them one at a time (TD302). Fix: drop foreach=False (or fused=True)."""
# torchdoctor-example: planted
import torch
from torch import nn


class Trainer:
    def __init__(self):
        blocks = [nn.Sequential(nn.Linear(32, 32), nn.LayerNorm(32), nn.GELU()) for _ in range(30)]
        self.model = nn.Sequential(*blocks, nn.Linear(32, 2))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, foreach=False)  # expect: TD302

    def step(self, x, y):
        loss = nn.functional.cross_entropy(self.model(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()


if __name__ == "__main__":
    torch.manual_seed(0)
    trainer = Trainer()
    for _ in range(60):
        trainer.step(torch.randn(16, 32), torch.randint(0, 2, (16,)))
