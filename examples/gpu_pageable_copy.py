"""Planted TD103 (pageable-transfer, GPU only): the DataLoader does not pin its batches
(`pin_memory=False`), so every `x.to(device)` copies 6 MB from pageable memory: the
driver stages it through a bounce buffer and the copy cannot overlap compute.

Fix: `DataLoader(..., pin_memory=True)` and `x.to(device, non_blocking=True)`.
On a CPU-only machine the script runs, but there is nothing to measure.
"""
# torchdoctor-example: planted
# torchdoctor-requires: cuda
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(6144, 3, 64, 64), torch.randint(0, 10, (6144,)))
    loader = DataLoader(data, batch_size=128, shuffle=True, num_workers=2, pin_memory=False)  # expect: TD103
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 64 * 64, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
