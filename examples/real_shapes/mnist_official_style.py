"""Imitates the official PyTorch examples' MNIST script: argparse flags (--batch-size,
--test-batch-size, --epochs, --lr, --gamma, --log-interval, --dry-run, --seed,
--save-model), a small CNN with log-softmax, `train(args, model, device, train_loader,
optimizer, epoch)` and `test(model, device, test_loader)` functions, Adadelta with a
StepLR schedule, and worker/pinning loader options only when CUDA is used. The digits are
synthetic (a fixed stroke template per class plus noise), so nothing is downloaded; the
epoch is shortened to 20 steps so that `test()` runs inside a 23-step doctor window.

Clean: nothing here is a habit to fix.

Traps: the loss is read for a print every 10th step only; `test()` runs once per epoch on
one batch of 64 images, ~2 % of the epoch (measured), and reads two numbers per batch; Adadelta's
per-tensor loop is torch's CPU default (multi-tensor on a GPU); the model is saved only
with --save-model.
"""
# torchdoctor-example: clean
import argparse

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset


class SyntheticDigits(Dataset):
    """28x28 uint8 images: each class is a fixed random stroke pattern plus pixel noise."""

    def __init__(self, n: int, seed: int):
        gen = torch.Generator().manual_seed(seed)
        templates = (torch.rand(10, 28, 28, generator=torch.Generator().manual_seed(0)) > 0.8).float()
        self.labels = torch.randint(0, 10, (n,), generator=gen)
        noisy = templates[self.labels] * 200 + torch.rand(n, 28, 28, generator=gen) * 55
        self.images = noisy.to(torch.uint8)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        # what ToTensor() + Normalize((0.1307,), (0.3081,)) would give
        image = self.images[index].float().div(255.0).sub(0.1307).div(0.3081).unsqueeze(0)
        return image, self.labels[index]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1)
        self.conv2 = nn.Conv2d(16, 32, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(32 * 12 * 12, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            seen, total = batch_idx * len(data), len(train_loader.dataset)
            # One read and one print per 10 steps: on a GPU a wait once in 10 steps, a few
            # percent at most, and the standard way to watch a run.
            loss_value = loss.item()  # trap: TD201
            print(f"Train Epoch: {epoch} [{seen}/{total} ({100.0 * seen / total:.0f}%)]\tLoss: {loss_value:.6f}")  # trap: TD703
            if args.dry_run:
                break


def test(model, device, test_loader):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            # One test batch per epoch: two reads per epoch, nothing to batch up.
            test_loss += F.nll_loss(output, target, reduction="sum").item()  # trap: TD201, TD203
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()  # trap: TD201, TD203
    test_loss /= len(test_loader.dataset)
    print(f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: {correct}/{len(test_loader.dataset)} "
          f"({100.0 * correct / len(test_loader.dataset):.0f}%)\n")


def main():
    parser = argparse.ArgumentParser(description="MNIST-shaped example")
    parser.add_argument("--batch-size", type=int, default=64, metavar="N")
    parser.add_argument("--test-batch-size", type=int, default=1000, metavar="N")
    parser.add_argument("--epochs", type=int, default=3, metavar="N")
    parser.add_argument("--lr", type=float, default=1.0, metavar="LR")
    parser.add_argument("--gamma", type=float, default=0.7, metavar="M")
    parser.add_argument("--no-cuda", action="store_true", default=False)
    parser.add_argument("--dry-run", action="store_true", default=False)
    parser.add_argument("--seed", type=int, default=1, metavar="S")
    parser.add_argument("--log-interval", type=int, default=10, metavar="N")
    parser.add_argument("--save-model", action="store_true", default=False)
    args = parser.parse_args()
    use_cuda = not args.no_cuda and torch.cuda.is_available()
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if use_cuda else "cpu")

    train_kwargs = {"batch_size": args.batch_size, "shuffle": True}
    test_kwargs = {"batch_size": args.test_batch_size}
    if use_cuda:
        cuda_kwargs = {"num_workers": 1, "pin_memory": True}
        train_kwargs.update(cuda_kwargs)
        test_kwargs.update(cuda_kwargs)
    train_loader = DataLoader(SyntheticDigits(1280, seed=1), **train_kwargs)
    test_loader = DataLoader(SyntheticDigits(64, seed=2), **test_kwargs)

    model = Net().to(device)
    # Adadelta's default implementation is multi-tensor for CUDA parameters; the per-tensor
    # loop seen on this CPU is torch's choice for CPU tensors, not the script's.
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)  # trap: TD302
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        # Once per 20-step epoch, one batch of 64 images forward only: ~2 % of the epoch.
        test(model, device, test_loader)  # trap: TD701
        scheduler.step()

    if args.save_model:
        # Only with --save-model, once, after training.
        torch.save(model.state_dict(), "mnist_cnn.pt")  # trap: TD702


if __name__ == "__main__":
    main()
