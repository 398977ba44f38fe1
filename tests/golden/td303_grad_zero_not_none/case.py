import torch

model = torch.nn.EmbeddingBag(400_000, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    opt.zero_grad(set_to_none=False)
    model.zero_grad(set_to_none=False)  # zeroed twice, as scripts that call both do
    model(torch.randint(0, 400_000, (4, 4))).sum().backward()
    opt.step()
