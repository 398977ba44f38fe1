# Clean: in-memory data and a model big enough that collating 64 samples (~0.7 ms) stays
# well under the 5 % data-wait threshold; a 1024-wide model sat right on it.
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(2048, 64), torch.randint(0, 4, (2048,))), batch_size=64)
model = torch.nn.Sequential(torch.nn.Linear(64, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 4))
# fused=True: left at its defaults, AdamW on a CPU runs the for-loop update (TD306, ~25 % of this step)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
for step, (x, y) in enumerate(loader):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 100 == 99:
        print(loss.item())
