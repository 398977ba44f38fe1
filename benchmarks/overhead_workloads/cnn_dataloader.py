"""Overhead workload (benchmarks/overhead.py): a small CNN (conv-BN-ReLU x3, pooling, a
linear head) trained with SGD and momentum from a DataLoader (num_workers=0) over a small
synthetic map-style Dataset whose `__getitem__` normalises and randomly flips each 32x32
image, as image-classification scripts do. It times each of its own steps (_steptimes.py)
and writes them to the JSON file named by argv[1]; argv[2] is the number of steps to run."""
import sys

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

from _steptimes import StepTimes

torch.manual_seed(0)
torch.set_num_threads(1)  # steadier timings on a shared 2-core machine


class Images(Dataset):
    def __init__(self, n: int):
        gen = torch.Generator().manual_seed(0)
        self.images = (torch.rand(n, 3, 32, 32, generator=gen) * 255).to(torch.uint8)
        self.labels = torch.randint(0, 10, (n,), generator=gen)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        image = self.images[i].float().div_(255.0).sub_(0.5).div_(0.25)
        if torch.rand(()) < 0.5:
            image = image.flip(-1)
        return image, self.labels[i]


def conv_bn(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())


n_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
loader = DataLoader(Images(2048), batch_size=32, shuffle=True, num_workers=0, drop_last=True)
model = nn.Sequential(conv_bn(3, 16), nn.MaxPool2d(2), conv_bn(16, 32), nn.MaxPool2d(2), conv_bn(32, 64),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
clock = StepTimes(sys.argv[1])
try:
    while len(clock) < n_steps:
        for images, labels in loader:
            loss = F.cross_entropy(model(images), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            clock.tick()
            if len(clock) >= n_steps:
                break
finally:
    clock.write()
