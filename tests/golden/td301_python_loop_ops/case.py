import torch

weight = torch.nn.Parameter(torch.randn(64, 8))
opt = torch.optim.SGD([weight], lr=0.1)
for step in range(100):
    x = torch.randn(64, 8)
    rows = torch.empty(64, 8)
    for i in range(64):
        rows[i] = x[i] * weight[i]
    rows.sum().backward()
    opt.step()
    opt.zero_grad()
