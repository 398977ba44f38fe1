"""A plain MLP on tabular features (four 512-wide layers), Adam."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--rows", type=int, default=20_000)
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)
features = TensorDataset(torch.randn(args.rows, 256), torch.randint(0, 10, (args.rows,)))
loader = DataLoader(features, batch_size=args.batch_size, shuffle=True, drop_last=True)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                      nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(100):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
