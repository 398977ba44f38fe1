"""A model with a Python loop in forward, as in the first user report: prompt embeddings written
into each sample's token embeddings one position at a time, then a small encoder, Adam."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class PromptModel(nn.Module):
    def __init__(self, vocab=1000, dim=64, prompt=6):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.prompt = nn.Parameter(torch.randn(prompt, dim))
        self.body = nn.Sequential(nn.Linear(dim, 256), nn.GELU(), nn.Linear(256, dim))
        self.head = nn.Linear(dim, 2)

    def forward(self, ids, positions):
        embeds = self.embed(ids)
        for i in range(ids.shape[0]):
            for j in range(self.prompt.shape[0]):
                embeds[i, positions[i, j], :] = self.prompt[j]
        return self.head(self.body(embeds).mean(1))


parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)
ids = torch.randint(0, 1000, (2048, 48))
positions = torch.stack([torch.randperm(48)[:6] for _ in range(2048)])
loader = DataLoader(TensorDataset(ids, positions, ids[:, 0] % 2), batch_size=args.batch_size, shuffle=True,
                    drop_last=True)
model = PromptModel()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(100):
    for batch_ids, batch_positions, labels in loader:
        loss = nn.functional.cross_entropy(model(batch_ids, batch_positions), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
