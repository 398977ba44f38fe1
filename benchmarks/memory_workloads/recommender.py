"""An embedding-heavy recommender as in the third user report: user and item embeddings
(6,000 and 4,000 x 64, ML-1M's sizes) with an MLP scorer, BPR loss on (user, positive,
negative) triples, Adam."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Recommender(nn.Module):
    def __init__(self, users=6000, items=4000, dim=64):
        super().__init__()
        self.users, self.items = nn.Embedding(users, dim), nn.Embedding(items, dim)
        self.score = nn.Sequential(nn.Linear(2 * dim, 256), nn.ReLU(), nn.Linear(256, 1))

    def forward(self, user, item):
        return self.score(torch.cat([self.users(user), self.items(item)], dim=-1)).squeeze(-1)


parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=256)
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)
triples = TensorDataset(torch.randint(0, 6000, (100_000,)), torch.randint(0, 4000, (100_000,)),
                        torch.randint(0, 4000, (100_000,)))
loader = DataLoader(triples, batch_size=args.batch_size, shuffle=True, drop_last=True)
model = Recommender()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(100):
    for user, positive, negative in loader:
        margin = model(user, positive) - model(user, negative)
        loss = -nn.functional.logsigmoid(margin).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
