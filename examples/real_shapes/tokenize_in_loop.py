"""Imitates a text-classification script that keeps its raw strings in a Python list and
tokenizes each batch inside the training loop with a regular expression and a vocabulary
dict, one list comprehension per batch, before an `nn.EmbeddingBag` model: common in
quick experiments and notebooks turned scripts, where no Dataset or DataLoader is used.
The reviews are generated from word lists, so nothing is downloaded.

Planted: one Python line (the tokenizing comprehension) takes most of every step, ~60 %
on this CPU (3.3 of 5.6 ms; the backward is next at ~25 %): TD901, reported at low
("where the time goes, no known habit matched"). No catalogue habit covers it: there is
no DataLoader to give workers to, no tensor op in it, no sync. The fix is the user's
call (tokenize once up front, or in a Dataset with workers).

Traps: the label list is turned into a tensor per batch (one small host op); the loss is
read for a print every 25 steps only.
"""
# torchdoctor-example: planted
import argparse
import itertools
import random
import re

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

TOKEN_RE = re.compile(r"[a-z']+|[.,!?;]")
GOOD = ["wonderful", "moving", "sharp", "funny", "beautiful", "tender", "brilliant", "gripping"]
BAD = ["dull", "clumsy", "tedious", "flat", "noisy", "shallow", "predictable", "bloated"]
FILLER = ["the", "film", "story", "actors", "scene", "music", "was", "and", "a", "it", "felt", "at", "times",
          "with", "ending", "camera", "dialogue", "plot", "of", "its", "director", "but", "so", "very", "quite"]


def make_reviews(n: int, seed: int) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(n):
        label = rng.randint(0, 1)
        cue = GOOD if label else BAD
        words = [rng.choice(cue) if rng.random() < 0.08 else rng.choice(FILLER) for _ in range(rng.randint(150, 250))]
        sentences = [" ".join(words[i:i + 12]).capitalize() + rng.choice(".!?") for i in range(0, len(words), 12)]
        texts.append(" ".join(sentences))
        labels.append(label)
    return texts, labels


class BagOfWords(nn.Module):
    def __init__(self, vocab_size: int, dim: int = 64):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab_size, dim, mode="mean")
        self.head = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, 2))

    def forward(self, flat_ids, offsets):
        return self.head(self.bag(flat_ids, offsets))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--print-every", type=int, default=25)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    texts, labels = make_reviews(2560, seed=11)
    vocab = {tok: i + 1 for i, tok in enumerate(sorted(set(GOOD + BAD + FILLER + list(".,!?;"))))}
    model = BagOfWords(len(vocab) + 1).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    order = list(range(len(texts)))
    step = 0
    for epoch in range(args.epochs):
        random.Random(epoch).shuffle(order)
        for start in range(0, len(order), args.batch_size):
            batch = order[start:start + args.batch_size]
            # ~200 regex tokens and dict look-ups per review, 64 reviews: pure Python, ~60 %
            # of the step, and the same host work on a GPU (the device would wait for it).
            ids = [[vocab.get(tok.strip("'"), 0) for tok in TOKEN_RE.findall(texts[i].lower())] for i in batch]  # expect: TD901
            lengths = [len(seq) for seq in ids]
            offsets = torch.tensor([0] + list(itertools.accumulate(lengths))[:-1], device=device)
            flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=sum(lengths))
            flat = torch.from_numpy(flat).to(device)
            # One small host op per batch.
            target = torch.tensor([labels[i] for i in batch], device=device)  # trap: TD201
            loss = F.cross_entropy(model(flat, offsets), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if step % args.print_every == 0:
                # One read every 25 steps.
                print(f"epoch {epoch} step {step}: loss {loss.item():.4f}")  # trap: TD201
            step += 1


if __name__ == "__main__":
    main()
