"""Planted: two DataLoader workers restarted every (short) epoch because
persistent_workers is left False (TD102). Fix: persistent_workers=True."""
# torchdoctor-example: planted
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(96, 32), torch.randint(0, 4, (96,)))
    loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=2)  # expect: TD102
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(30):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
