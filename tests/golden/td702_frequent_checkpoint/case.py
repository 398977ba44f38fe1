import io
import torch

# The checkpoint (weights and momentum, 32 MB) is written every step, and costs about twice
# the step itself: found on a busy machine too.
model = torch.nn.Linear(2048, 2048)
# fused=True: the for-loop SGD update took ~30 % of this step on a CPU (TD306, ~1.07x): one cause per case
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
for step in range(100):
    model(torch.randn(1, 2048)).sum().backward()
    opt.step()
    opt.zero_grad()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, io.BytesIO())
