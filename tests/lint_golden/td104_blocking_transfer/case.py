"""TD104: pinned batches copied without non_blocking=True."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda")
data = TensorDataset(torch.randn(512, 16), torch.randn(512, 1))
loader = DataLoader(data, batch_size=64, num_workers=2, pin_memory=True, persistent_workers=True)
model = nn.Linear(16, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


class Trainer:
    def __init__(self, loader):
        self.loader = loader
        self.device = device

    def to_device(self, x, y):
        return x.to(self.device), y.to(self.device, non_blocking=True)  # triggers: x copy only

    def fit(self):
        for x, y in self.loader:
            x, y = self.to_device(x, y)
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()


for epoch in range(3):
    for step, (x, y) in enumerate(loader):
        x = x.to(device)  # triggers
        y = y.cuda()  # triggers
        half = x.to(torch.float16)  # no finding: a dtype change, not a copy to the GPU
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    for batch in loader:
        inputs = batch[0].to(device, non_blocking=True)  # no finding
        targets = batch[1].to(device, non_blocking=False)  # triggers: explicit False
        nn.functional.mse_loss(model(inputs), targets).backward()
        opt.step()
Trainer(loader).fit()
