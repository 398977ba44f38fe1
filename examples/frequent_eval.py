"""Planted TD701 (frequent-eval): a full pass over an 8192-sample validation set every
2 training steps, so most of the wall time is spent evaluating, not training.

Fix: evaluate every few hundred steps (or on a fixed subset during training) and on the
full set at the end.
"""
# torchdoctor-example: planted
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--eval_every", type=int, default=2)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
train = DataLoader(TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,))), batch_size=64, shuffle=True)  # lint-expect: TD103
val = DataLoader(TensorDataset(torch.randn(8192, 64), torch.randint(0, 10, (8192,))), batch_size=512)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)


def validate():
    model.eval()  # trap: TD701 (the phase is blamed on the loop's call below)
    correct = torch.zeros((), device=device)
    with torch.no_grad():
        for x, y in val:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(1) == y).sum()
    model.train()
    return correct / len(val.dataset)


step = 0
for epoch in range(args.epochs):
    for x, y in train:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % args.eval_every == 0:
            acc = validate()  # expect: TD701
    print(f"epoch {epoch} step {step} val acc {acc.item():.3f}")
