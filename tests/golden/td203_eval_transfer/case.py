import time

import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(16, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
val = DataLoader(TensorDataset(torch.randn(16, 16)), batch_size=4)
for step in range(100):
    model(torch.randn(32, 16)).sum().backward()
    time.sleep(0.002)  # steps of a few ms: the one evaluation is not 100 steps' worth on a cold, busy machine
    opt.step()
    opt.zero_grad()
    if step % 60 == 0:  # once in the measured run: no frequent-eval finding to confound TD203
        model.eval()
        preds = []
        with torch.no_grad():
            for (x,) in val:
                preds.extend(model(x).argmax(1).tolist())
        model.train()
