"""Planted TD102 (worker-respawn): a small dataset (an epoch is 3 batches) loaded by two
worker processes with `persistent_workers` left False, so every epoch starts and tears
down both workers again; with many short epochs the start-up dominates.

Fix: `DataLoader(..., num_workers=2, persistent_workers=True)` (or num_workers=0 for a
dataset this small and cheap).
"""
# torchdoctor-example: planted
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"


def main(epochs=15):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(96, 32), torch.randint(0, 4, (96,)))
    loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=2)  # expect: TD102  # lint-expect: TD103
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(epochs):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if epoch % 5 == 4:
            print(f"epoch {epoch + 1} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
