"""Planted TD201 (host-sync): `running_loss += loss.item()` in every training step. On a
GPU each `.item()` makes the host wait until all queued kernels have finished, so the GPU
idles while Python queues the next step (on a CPU the read costs almost nothing; the
doctor reports it as a hazard there).

Fix: accumulate on the device, `running_loss += loss.detach()`, and call `.item()` only
when printing, every N steps.
"""
# torchdoctor-example: planted
import torch
from torch import nn


class Trainer:
    def __init__(self, model, lr=1e-3, batch_size=128, log_every=20):
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = model.to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr)
        self.batch_size = batch_size
        self.log_every = log_every
        self.step = 0

    def batches(self, x, y):
        perm = torch.randperm(len(x))
        return zip(x[perm].split(self.batch_size), y[perm].split(self.batch_size))

    def train_step(self, x, y):
        x, y = x.to(self.device), y.to(self.device)
        loss = nn.functional.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss

    def fit(self, x, y, epochs):
        for epoch in range(epochs):
            running_loss = 0.0
            for xb, yb in self.batches(x, y):
                loss = self.train_step(xb, yb)
                running_loss += loss.item()  # expect: TD201
                self.step += 1
                if self.step % self.log_every == 0:
                    print(f"epoch {epoch} step {self.step} loss {running_loss / self.log_every:.4f}")
                    running_loss = 0.0


if __name__ == "__main__":
    torch.manual_seed(0)
    x, y = torch.randn(3072, 128), torch.randint(0, 10, (3072,))
    model = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10))
    Trainer(model).fit(x, y, epochs=2)
