import io
import torch

model = torch.nn.Linear(1024, 1024)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    model(torch.randn(8, 1024)).sum().backward()
    opt.step()
    opt.zero_grad()
    torch.save(model.state_dict(), io.BytesIO())
