"""Clean: a small transformer classifier compiled once before the loop, fixed batch and sequence
shapes, batches made in the loop, the loss read every 50 steps. It runs one compiled graph per
step and never recompiles: torchdoctor should find nothing of high or medium severity, and not
suggest compiling (TD404) a model that already is.
"""
# torchdoctor-example: clean
import argparse

import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self, vocab=300, dim=32, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, nhead=2, dim_feedforward=64, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids)).mean(1))


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--batch_size", type=int, default=16)
parser.add_argument("--seq_len", type=int, default=32)
args = parser.parse_args()

torch.manual_seed(0)
gen = torch.Generator().manual_seed(0)
model = torch.compile(Classifier())
opt = torch.optim.Adam(model.parameters(), lr=3e-4, fused=True)  # not the CPU's for-loop default (TD306)
running = torch.zeros(())
for step in range(1, args.steps + 1):
    ids = torch.randint(0, 300, (args.batch_size, args.seq_len), generator=gen)
    labels = ids[:, 0] % 4
    loss = nn.functional.cross_entropy(model(ids), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    running += loss.detach()
    if step % 50 == 0:
        print(f"step {step} loss {running.item() / 50:.4f}")
        running.zero_()
