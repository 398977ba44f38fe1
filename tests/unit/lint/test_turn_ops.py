"""TD301 on Python loops whose every turn issues tensor ops on its own part of the data (a cell
stepped per position, a loss per sample, separate heads on one input), and not on loops that are
sequential by nature (a stack of layers, one module reused to a random depth) or not per step."""

from helpers.lint_files import lines_of

HEAD = "import random\nimport torch\nfrom torch import nn\nimport torch.nn.functional as F\n"
TRAIN = "\nmodel = Net()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor step in range(100):\n" \
        "    out = model(x)\n    loss = F.cross_entropy(out, y)\n    loss.backward()\n    opt.step()\n"


def td301(tmp_path, body: str) -> list[int]:
    return lines_of(tmp_path, HEAD + body + TRAIN, "TD301")


def test_a_cell_stepped_per_position_and_a_module_applied_per_position_are_found(tmp_path):
    assert td301(tmp_path, """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(8, 8)
        self.wte = nn.Embedding(10, 8)
        self.head = nn.Linear(8, 10)
    def forward(self, idx):
        b, t = idx.size()
        emb = self.wte(idx)
        h = torch.zeros(b, 8)
        hiddens = []
        for i in range(t):
            h = self.cell(emb[:, i, :], h)
            hiddens.append(h)
        return self.head(torch.stack(hiddens, 1))
""") == [17]


def test_context_gathered_by_rolling_the_input_each_turn_is_found(tmp_path):
    # no loop variable in the body: each turn's embedding is collected and concatenated
    assert td301(tmp_path, """
class Net(nn.Module):
    def __init__(self, block_size=16):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(10, 8)
    def forward(self, idx):
        embs = []
        for k in range(self.block_size):
            embs.append(self.wte(idx))
            idx = torch.roll(idx, 1, 1)
        return torch.cat(embs, -1)
""") == [13]


def test_separate_heads_on_one_input_are_found_but_a_stack_of_layers_is_not(tmp_path):
    assert td301(tmp_path, """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([nn.Linear(8, 2) for _ in range(4)])
        self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])
    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        for i in range(len(self.blocks)):
            x = self.blocks[i](x)
        return torch.cat([h(x) for h in self.heads], dim=-1)
""") == [16]


def test_a_loss_per_sample_and_attention_scores_per_position_are_found(tmp_path):
    assert lines_of(tmp_path, HEAD + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.Linear(8, 8)
    def score(self, q, k):
        return torch.dot(q.view(-1), self.attn(k).view(-1))
    def forward(self, q, keys):
        n = len(keys)
        scores = torch.zeros(n)
        for i in range(n):
            scores[i] = self.score(q, keys[i])
        return scores
model = Net()
criterion = nn.CrossEntropyLoss()
for step in range(100):
    out = model(q, keys)
    loss = 0
    for i in range(0, len(target)):
        loss += criterion(out[i], target[i])
    loss.backward()
    opt.step()
""", "TD301") == [16, 23]  # the writes of `scores[i]` (an element loop), the loop of losses


def test_loss_terms_collected_per_time_step_and_stacked_are_found(tmp_path):
    assert lines_of(tmp_path, HEAD + """
def finish_episode(saved, returns, optimizer):
    policy_losses, value_losses = [], []
    for (log_prob, value), R in zip(saved, returns):
        advantage = R - value.detach()
        policy_losses.append(-log_prob * advantage)
        value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))
    optimizer.zero_grad()
    loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()
    loss.backward()
    optimizer.step()
""", "TD301") == [8]


def test_loops_that_are_no_per_turn_work_are_not_found(tmp_path):
    assert td301(tmp_path, """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.middle = nn.Linear(8, 8)
        self.heads = nn.ModuleList([nn.Linear(8, 2), nn.Linear(16, 2)])
    def forward(self, x, y):
        h = self.inp(x)
        feats = [x, h]
        outputs = [h, self.middle(h)]
        for _ in range(random.randint(0, 3)):
            h = self.middle(h).clamp(min=0)
        for _ in range(4):
            h = self.middle(h)
        outs = [head(f) for head, f in zip(self.heads, feats)]
        levels = []
        for i in range(len(feats)):
            levels.append(self.heads[i](feats[i] * 2))
        levels = torch.cat(levels)
        loss = 0
        for out in outputs:
            loss = loss + F.cross_entropy(out, y)
        gathered = torch.cat([torch.ones_like(x) for _ in range(4)])
        return h, outs, loss, gathered
""") == []


def test_loops_over_parameters_and_over_the_batch_tuple_are_not_found(tmp_path):
    assert lines_of(tmp_path, HEAD + """
for step, batch in enumerate(loader):
    batch = [t.to('cuda') for t in batch]
    loss = model(*batch)
    loss.backward()
    flat = torch.cat([p.grad.view(-1) for p in model.parameters()])
    params = [p for p in model.parameters() if p.grad is not None]
    norm = torch.norm(torch.stack([torch.norm(p.grad.detach(), 2.0) for p in params]), 2.0)
    opt.step()
    for p_ema, p in zip(ema.parameters(), model.parameters()):
        p_ema.mul_(0.99).add_(p.detach(), alpha=0.01)
""", "TD301") == []
