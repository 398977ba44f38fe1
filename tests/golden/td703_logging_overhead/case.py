import logging
import torch

log = logging.getLogger("train")
log.setLevel(logging.INFO)
log.propagate = False
log.addHandler(logging.StreamHandler(open("/dev/null", "w")))
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
    log.info("step %d weight %s", step, model.weight)
