"""TD103: pin_memory off while the loader's batches are copied to the GPU."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--pin", action="store_true")
args = parser.parse_args()
device = "cuda" if torch.cuda.is_available() else "cpu"
data = TensorDataset(torch.randn(512, 16), torch.randn(512, 1))
model = nn.Linear(16, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)

pageable = DataLoader(data, batch_size=64, num_workers=2)  # triggers: batches go to `device`
explicit_off = DataLoader(data, batch_size=64, num_workers=2, pin_memory=False)  # triggers
pinned = DataLoader(data, batch_size=64, num_workers=2, pin_memory=True)  # no finding
pinned_on_cuda = DataLoader(data, batch_size=64, num_workers=2, pin_memory=device == "cuda")  # no finding
stays_on_cpu = DataLoader(data, batch_size=64, num_workers=2)  # no finding: .to("cpu")
from_cli = DataLoader(data, batch_size=64, num_workers=2, pin_memory=args.pin)  # info
validation = DataLoader(data, batch_size=256, num_workers=2)  # low: evaluation only

for loader in (pageable, explicit_off, pinned, pinned_on_cuda, from_cli):
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
for batch in stays_on_cpu:
    x, y = batch[0].to("cpu"), batch[1].to("cpu")
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
for x, y in pageable:
    x = x.cuda()
    model(x).sum().backward()
    opt.step()
for x, y in explicit_off:
    model(x.to(device)).sum().backward()
    opt.step()
for x, y in from_cli:
    model(x.to(device)).sum().backward()
    opt.step()

model.eval()
with torch.no_grad():
    for x, y in validation:
        total = model(x.to(device)).sum()
