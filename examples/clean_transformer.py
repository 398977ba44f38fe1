"""Clean: a small transformer classifier trained on random token sequences, with the
loss logged every 100 steps and no per-step host reads."""
# torchdoctor-example: clean
import argparse

import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"


class Classifier(nn.Module):
    def __init__(self, vocab=500, dim=64, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, 4, 128, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids)).mean(1))


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
args = parser.parse_args()
torch.manual_seed(0)
model = Classifier().to(device)
opt = torch.optim.Adam(model.parameters(), lr=3e-4)
for step in range(args.steps):
    ids = torch.randint(0, 500, (32, 48), device=device)
    labels = torch.randint(0, 4, (32,), device=device)
    loss = nn.functional.cross_entropy(model(ids), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step % 100 == 99:
        print(f"step {step + 1} loss {loss.item():.4f}")
