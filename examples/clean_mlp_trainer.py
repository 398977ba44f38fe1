"""Clean: a Trainer class fitting an MLP on a synthetic tabular regression task. The
training loader fetches whole batches from the in-memory tensors with one indexing op
(pinned on a GPU), gradients are set to None, the loss is read every 20 steps, and
validation runs once after training. torchdoctor should find nothing of high or medium
severity here.
"""
# torchdoctor-example: clean
import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset


class Trainer:
    def __init__(self, model, train_set, val_set, batch_size=1024, lr=1e-3, log_every=20):
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = model.to(self.device)
        pin = self.device == "cuda"
        # in-memory tensors: fetch each batch with one indexing op instead of per-sample collation
        sampler = BatchSampler(RandomSampler(train_set), batch_size, drop_last=True)
        self.train_loader = DataLoader(train_set, sampler=sampler, batch_size=None, pin_memory=pin)
        self.val_loader = DataLoader(val_set, batch_size=1024, pin_memory=pin)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=1e-4)
        self.log_every = log_every

    def to_device(self, x, y):
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def fit(self, epochs):
        step, running = 0, torch.zeros((), device=self.device)
        for epoch in range(epochs):
            for x, y in self.train_loader:
                x, y = self.to_device(x, y)
                loss = nn.functional.mse_loss(self.model(x), y)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                running += loss.detach()
                step += 1
                if step % self.log_every == 0:
                    print(f"epoch {epoch} step {step} mse {running.item() / self.log_every:.4f}")
                    running.zero_()

    @torch.no_grad()
    def validate(self):
        self.model.eval()
        total = torch.zeros((), device=self.device)
        for x, y in self.val_loader:
            x, y = self.to_device(x, y)
            total += nn.functional.mse_loss(self.model(x), y, reduction="sum")
        self.model.train()
        return total.item() / len(self.val_loader.dataset)


if __name__ == "__main__":
    torch.manual_seed(0)
    w = torch.randn(32, 1)
    x_train, x_val = torch.randn(16384, 32), torch.randn(2048, 32)
    train_set = TensorDataset(x_train, torch.tanh(x_train @ w) + 0.1 * torch.randn(16384, 1))
    val_set = TensorDataset(x_val, torch.tanh(x_val @ w))
    model = nn.Sequential(nn.Linear(32, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1))
    trainer = Trainer(model, train_set, val_set)
    trainer.fit(epochs=3)
    print(f"val mse {trainer.validate():.4f}")
