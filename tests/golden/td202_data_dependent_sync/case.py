import torch

model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    out = model(torch.randn(64, 16)).squeeze(1)
    keep = torch.nonzero(out > 0).squeeze(1)
    loss = out.index_select(0, keep).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
