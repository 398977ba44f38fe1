"""Clean: a small CNN on random images with a well-configured loop: loss read every 50
steps, zero_grad(set_to_none=True), evaluation only at the end."""
# torchdoctor-example: clean
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"


def build_model():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, 10),
    ).to(device)


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(2048, 3, 32, 32), torch.randint(0, 10, (2048,)))
    loader = DataLoader(data, batch_size=64, shuffle=True, drop_last=True,
                        pin_memory=device == "cuda")
    model = build_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    running = torch.zeros((), device=device)
    for epoch in range(2):
        for step, (x, y) in enumerate(loader):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.detach()
            if step % 50 == 49:
                print(f"epoch {epoch} step {step + 1} loss {running.item() / 50:.4f}")
                running.zero_()


if __name__ == "__main__":
    main()
