"""Clean: a small CNN on random 32x32 images with a well-configured loop: an in-memory
dataset batched by the DataLoader (pinned when on a GPU, non-blocking copies), default
`zero_grad()` (set_to_none=True), the loss accumulated on the device and read every 50
steps, and one evaluation at the end. torchdoctor should find nothing of high or medium
severity here.
"""
# torchdoctor-example: clean
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"


def build_model():
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(64, 10),
    ).to(device)


def evaluate(model, loader):
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=device)
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            correct += (model(x).argmax(1) == y).sum()
    model.train()
    return correct.item() / len(loader.dataset)


def main(epochs=2, log_every=50):
    torch.manual_seed(0)
    train = TensorDataset(torch.randn(2048, 3, 32, 32), torch.randint(0, 10, (2048,)))
    val = TensorDataset(torch.randn(512, 3, 32, 32), torch.randint(0, 10, (512,)))
    train_loader = DataLoader(train, batch_size=64, shuffle=True, drop_last=True, pin_memory=device == "cuda")
    val_loader = DataLoader(val, batch_size=256, pin_memory=device == "cuda")
    model = build_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    running = torch.zeros((), device=device)
    step = 0
    for epoch in range(epochs):
        for x, y in train_loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.detach()
            step += 1
            if step % log_every == 0:
                print(f"epoch {epoch} step {step} loss {running.item() / log_every:.4f}")
                running.zero_()
    print(f"val acc {evaluate(model, val_loader):.3f}")


if __name__ == "__main__":
    main()
