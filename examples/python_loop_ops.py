"""Planted TD301 (python-loop-ops): SpecAugment-style time masking written as a nested
Python loop over the batch, one tiny slice write per (sample, mask): 64 x 8 = 512 small
ops per step, each paying Python and dispatch overhead (and on a GPU a kernel launch)
for a few hundred elements of work.

Fix: build all masks at once and apply them in one op:
    s = torch.tensor(starts, device=feats.device)[..., None]         # (B, masks, 1)
    t = torch.arange(feats.shape[1], device=feats.device)            # (T,)
    hit = ((t >= s) & (t < s + width)).any(1)                         # (B, T)
    feats = feats.masked_fill(hit[..., None], 0.0)
"""
# torchdoctor-example: planted
import random

import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
BATCH, FRAMES, MELS, MASKS, WIDTH = 64, 100, 40, 8, 6


def time_mask(feats, starts, width):
    for i in range(feats.shape[0]):
        for start in starts[i]:
            feats[i, start:start + width, :] = 0.0  # expect: TD301
    return feats


random.seed(0)
torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv1d(MELS, 64, kernel_size=5, padding=2), nn.ReLU(),
    nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(64, 12),
).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

try:
    for step in range(80):
        feats = torch.randn(BATCH, FRAMES, MELS, device=device)
        labels = torch.randint(0, 12, (BATCH,), device=device)
        starts = [[random.randrange(FRAMES - WIDTH) for _ in range(MASKS)] for _ in range(BATCH)]
        feats = time_mask(feats, starts, WIDTH)
        loss = nn.functional.cross_entropy(model(feats.transpose(1, 2)), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 19:
            print(f"step {step + 1} loss {loss.item():.4f}")
except Exception as exc:  # a catch-all around the loop, as many scripts have
    print(f"training stopped: {exc!r}")
