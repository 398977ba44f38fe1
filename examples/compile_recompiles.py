"""Planted TD405 (recompilation): a compiled classifier fed batches padded to their longest
sequence, so every batch has a new length. `torch.compile(..., dynamic=False)` (set once to
avoid dynamic-shape kernels) makes each new length a new compile: the step recompiles, then
hits Dynamo's recompile limit and runs the model uncompiled from there on.

Fix: mark the length dimension dynamic (`torch._dynamo.mark_dynamic(ids, 1)`, or
`dynamic=True`), or pad lengths to a few buckets (multiples of 16) so only those compile.
"""
# torchdoctor-example: planted
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Sentences(Dataset):
    def __init__(self, n=2048, vocab=200, seed=0):
        gen = torch.Generator().manual_seed(seed)
        self.lengths = torch.randint(8, 72, (n,), generator=gen).tolist()
        self.rows = [torch.randint(1, vocab, (length,), generator=gen) for length in self.lengths]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i], self.lengths[i] % 3


def pad_batch(items):
    longest = max(len(ids) for ids, _ in items)  # every batch its own length
    ids = torch.zeros(len(items), longest, dtype=torch.long)
    for row, (seq, _) in enumerate(items):
        ids[row, : len(seq)] = seq
    return ids, torch.tensor([label for _, label in items])


class Classifier(nn.Module):
    def __init__(self, vocab=200, dim=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Sequential(nn.Linear(dim, 64), nn.GELU(), nn.Linear(64, dim))
        self.head = nn.Linear(dim, 3)

    def forward(self, ids):
        h = self.embed(ids)
        h = h + self.mix(h)
        return self.head(h.mean(1))


parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=16)
args = parser.parse_args()

torch.manual_seed(0)
loader = DataLoader(Sentences(), batch_size=args.batch_size, shuffle=True, collate_fn=pad_batch)
model = Classifier()
compiled = torch.compile(model, dynamic=False)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)  # not the CPU's for-loop default (TD306)
for epoch in range(args.epochs):
    for ids, labels in loader:
        logits = compiled(ids)  # expect: TD405
        loss = nn.functional.cross_entropy(logits, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
print("done")
