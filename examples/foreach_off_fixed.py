"""Hand-fixed version of foreach_off.py (the reference for `benchmarks/tune_accuracy.py`).

Planted TD302 (optimizer-foreach-off): AdamW created with `foreach=False` over a deep
stack of small Linear+LayerNorm blocks (122 parameter tensors), so `optimizer.step()`
runs a Python loop that issues about a dozen small ops per tensor.

Fix applied: `foreach=True` (the default only on CUDA; on CPU it must be asked for), or `fused=True`.
"""
# torchdoctor-example: fixed
# torchdoctor-fixes: foreach_off.py
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"


class Trainer:
    def __init__(self, depth=30, width=32):
        blocks = [nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()) for _ in range(depth)]
        self.model = nn.Sequential(*blocks, nn.Linear(width, 2)).to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.01, foreach=True)

    def step(self, x, y):
        loss = nn.functional.cross_entropy(self.model(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach()

    def train(self, steps, batch_size=16):
        for i in range(steps):
            x = torch.randn(batch_size, 32, device=device)
            y = (x.sum(1) > 0).long()
            loss = self.step(x, y)
            if i % 25 == 24:
                print(f"step {i + 1} loss {loss.item():.4f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    Trainer().train(steps=75)
