"""A sequence forecaster as in the fourth user report: a 2-layer LSTM over 50 steps, Adam."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Forecaster(nn.Module):
    def __init__(self, features=16, hidden=128):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=2, batch_first=True)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x):
        sequence, _ = self.lstm(x)
        return self.out(sequence[:, -1])


parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)
series = TensorDataset(torch.randn(8192, 50, 16), torch.randn(8192, 1))
loader = DataLoader(series, batch_size=args.batch_size, shuffle=True, drop_last=True)
model = Forecaster()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(100):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
