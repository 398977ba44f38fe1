"""Planted: a full pass over a large validation set every 2 steps (TD701).
Fix: evaluate every few hundred steps, or on a subset."""
# torchdoctor-example: planted
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
train = DataLoader(TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,))), batch_size=64, shuffle=True)
val = DataLoader(TensorDataset(torch.randn(8192, 64), torch.randint(0, 10, (8192,))), batch_size=512)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)


def validate():
    model.eval()  # expect: TD701
    with torch.no_grad():
        correct = sum((model(x).argmax(1) == y).sum() for x, y in val)
    model.train()
    return correct / len(val.dataset)


step = 0
for epoch in range(3):
    for x, y in train:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 2 == 0:
            acc = validate()
