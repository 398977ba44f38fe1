import torch

model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
total = 0.0
for step in range(100):
    loss = model(torch.randn(32, 16)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    total += loss.item()
    if step % 50 == 0:
        print(loss.item())
