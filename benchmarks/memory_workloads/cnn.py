"""A small convolutional classifier on 32x32 images, batch norm, SGD with momentum."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def conv(c_in, c_out, stride):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(conv(3, 32, 1), conv(32, 64, 2), conv(64, 64, 1), conv(64, 128, 2))
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=16)
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)
images = TensorDataset(torch.randn(4096, 3, 32, 32), torch.randint(0, 10, (4096,)))
loader = DataLoader(images, batch_size=args.batch_size, shuffle=True, drop_last=True)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(100):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
