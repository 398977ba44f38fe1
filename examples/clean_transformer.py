"""Clean: a small transformer classifier on random token sequences, batches generated on
the device, the loss read every 50 steps behind a modulo guard, default zero_grad, and a
single evaluation at the end. torchdoctor should find nothing of high or medium severity.
"""
# torchdoctor-example: clean
import argparse

import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"


class Classifier(nn.Module):
    def __init__(self, vocab=500, dim=64, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=128, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids)).mean(1))


def batch(gen, size, args):
    ids = torch.randint(0, args.vocab, (size, args.seq_len), device=device, generator=gen)
    return ids, ids[:, 0] % 4  # the label is readable from the first token


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--batch_size", type=int, default=32)
parser.add_argument("--seq_len", type=int, default=48)
parser.add_argument("--vocab", type=int, default=500)
parser.add_argument("--log_every", type=int, default=50)
args = parser.parse_args()

torch.manual_seed(0)
gen = torch.Generator(device=device).manual_seed(0)
model = Classifier(vocab=args.vocab).to(device)
opt = torch.optim.Adam(model.parameters(), lr=3e-4)
running = torch.zeros((), device=device)
for step in range(1, args.steps + 1):
    ids, labels = batch(gen, args.batch_size, args)
    loss = nn.functional.cross_entropy(model(ids), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    running += loss.detach()
    if step % args.log_every == 0:
        print(f"step {step} loss {running.item() / args.log_every:.4f}")
        running.zero_()

model.eval()
with torch.no_grad():
    ids, labels = batch(gen, 512, args)
    acc = (model(ids).argmax(1) == labels).float().mean()
print(f"final acc {acc.item():.3f}")
