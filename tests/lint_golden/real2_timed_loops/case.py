"""Real shape 2: training and validation loops that read the clock for their meters still pay
for every synchronize; only a loop that times the model alone (no batches drawn, no loss) is a
benchmark. `# want: CODE` lines must be reported at low or above; `# trap` lines must not be."""
import time
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Meter:
    total: float = 0.0
    count: int = 0

    def update(self, value, n=1):
        self.total += value * n
        self.count += n


class Trainer:
    def __init__(self, model, optimizer, train_loader, val_loader, device="cuda"):
        self.model = model
        self.optimizer = optimizer
        self.train_loader = train_loader
        self.val_loader = val_loader
        self.device = device
        self.criterion = nn.CrossEntropyLoss()

    def train_epoch(self):
        batch_time = Meter()
        end = time.time()
        for images, target in self.train_loader:
            images = images.to(self.device, non_blocking=True)
            target = target.to(self.device, non_blocking=True)
            loss = self.criterion(self.model(images), target)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            torch.cuda.synchronize()  # want: TD204
            batch_time.update(time.time() - end)
            end = time.time()

    @torch.no_grad()
    def validate(self):
        self.model.eval()
        start = time.perf_counter()
        for images, target in self.val_loader:
            output = self.model(images.to(self.device, non_blocking=True))
            torch.cuda.synchronize()  # want: TD204
            elapsed = time.perf_counter() - start
        return elapsed


def rollout_timing(model, n_iters=50):
    """A forward-only benchmark: the sync is what makes the clock honest."""
    x = torch.randn(64, 3, 224, 224, device="cuda")
    times = []
    for _ in range(n_iters):
        t0 = time.perf_counter()
        model(x)
        torch.cuda.synchronize()  # trap: timing the model alone
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def timed_steps(model, batches, loss_fn, steps):
    """Forward and loss over drawn batches: a real step, even though it reads the clock."""
    it = iter(batches)
    for i in range(steps):
        x, y = next(it)
        t0 = time.monotonic()
        out = loss_fn(model(x.cuda()), y.cuda())
        torch.cuda.synchronize()  # want: TD204
        print(i, time.monotonic() - t0)


def warm_up(model, shape, seconds=2.0):
    """Spin the GPU until the clocks settle; no data, no loss."""
    deadline = time.time() + seconds
    dummy = torch.zeros(shape, device="cuda")
    while time.time() < deadline:
        model(dummy)
        torch.cuda.synchronize()  # trap: a warm-up loop
