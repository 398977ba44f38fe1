"""Each lint rule on small snippets: a case that must trigger next to one that must not.
The golden cases (tests/lint_golden) hold the fuller scripts; these pin single decisions."""

import pytest
from helpers.lint_files import found, lines_of, severities

HEAD = "import os\nimport torch\nfrom torch import nn\nfrom torch.utils.data import DataLoader\n"
LOOP = "for x, y in loader:\n    loss = model(x)\n    loss.backward()\n    opt.step()\n"

CASES = [
    # (name, code, snippet after HEAD, lines expected to carry `code`)
    ("TD105 missing num_workers feeding the loop", "TD105",
     "loader = DataLoader(MyDataset(), batch_size=8)\n" + LOOP, [5]),
    ("TD105 num_workers from os.cpu_count()", "TD105",
     "loader = DataLoader(MyDataset(), num_workers=os.cpu_count())\n" + LOOP, []),
    ("TD105 only iterated without backward", "TD105",
     "loader = DataLoader(MyDataset())\nfor x in loader:\n    print(x.shape)\n", []),
    ("TD102 while-True epoch loop", "TD102",
     "loader = DataLoader(ds, num_workers=4)\nwhile True:\n" + "".join("    " + l + "\n" for l in LOOP.splitlines()),
     [5]),
    ("TD102 persistent from a constant True", "TD102",
     "KEEP = True\nloader = DataLoader(ds, num_workers=4, persistent_workers=KEEP)\nfor e in range(9):\n"
     + "".join("    " + l + "\n" for l in LOOP.splitlines()), []),
    ("TD103 batch dict moved with a comprehension", "TD103",
     "loader = DataLoader(ds, num_workers=2)\nfor batch in loader:\n"
     "    batch = {k: v.to('cuda') for k, v in batch.items()}\n    model(**batch).backward()\n    opt.step()\n", [5]),
    ("TD103 pin_memory from a torch.cuda.is_available() constant", "TD103",
     "PIN = torch.cuda.is_available()\nloader = DataLoader(ds, num_workers=2, pin_memory=PIN)\n"
     "for x in loader:\n    model(x.cuda()).backward()\n    opt.step()\n", []),
    ("TD104 unpinned loader is TD103's, not TD104's", "TD104",
     "loader = DataLoader(ds, num_workers=2)\nfor x in loader:\n    model(x.cuda()).backward()\n    opt.step()\n", []),
    ("TD104 next(iter(loader)) in a while loop", "TD104",
     "loader = DataLoader(ds, num_workers=2, pin_memory=True)\nit = iter(loader)\nwhile True:\n"
     "    x, y = next(it)\n    x = x.to('cuda')\n    model(x).backward()\n    opt.step()\n", [9]),
    ("TD201 .cpu() on the model is not a read", "TD201",
     LOOP + "    model.cpu()\n    m = model.to('cpu')\n", []),
    ("TD201 str.format of a tensor", "TD201", LOOP + "    msg = 'loss {}'.format(loss)\n", [9]),
    ("TD201 while-condition on a tensor", "TD201",
     "while loss > 0.1:\n    loss = model(x)\n    loss.backward()\n    opt.step()\n", [5]),
    ("TD202 masked assignment of a tensor in the step", "TD202", LOOP + "    m = x > 0\n    x[m] = y\n", [10]),
    ("TD202 numpy unique is not a torch op", "TD202",
     "import numpy as np\n" + LOOP + "    u = np.unique(y)\n", []),
    ("TD203 eval loop behind a modulo guard", "TD203",
     "model.eval()\nwith torch.no_grad():\n    for i, (x, y) in enumerate(loader):\n        out = model(x)\n"
     "        if i % 10 == 0:\n            print(out.cpu())\n", []),
    ("TD204 synchronize in a function called every step", "TD204",
     "def timed():\n    torch.cuda.synchronize()\n" + LOOP + "    timed()\n", [6]),
    ("TD301 loop over a tensor's rows in forward", "TD301",
     "class M(nn.Module):\n    def forward(self, x):\n        for i in range(x.size(0)):\n            x[i] = x[i] * 2\n"
     "        return x\n", [8]),
    ("TD301 loop over a Python list is not a tensor loop", "TD301",
     "class M(nn.Module):\n    def forward(self, x, lengths: list[int]):\n        for i in range(len(lengths)):\n"
     "            lengths[i] = 0\n        return x\n", []),
    ("TD302 foreach=False on an optimizer alias", "TD302",
     "from torch.optim import AdamW as Opt\nopt = Opt(params, foreach=False)\n", [6]),
    ("TD303 set_to_none=True", "TD303", "opt.zero_grad(set_to_none=True)\n", []),
    ("TD403 set_float32_matmul_precision from a constant", "TD403",
     "MODE = 'highest'\ntorch.set_float32_matmul_precision(MODE)\n", [6]),
    ("TD405 compile in an epoch loop", "TD405",
     "for epoch in range(3):\n    cm = torch.compile(model)\n", [6]),
    ("TD601 accumulation without DDP in the file", "TD601",
     "for i, x in enumerate(loader):\n    model(x).backward()\n    if i % 4 == 0:\n        opt.step()\n", []),
    ("TD604 data_parallel function", "TD604",
     "from torch.nn.parallel import data_parallel\nout = data_parallel(model, x)\n", [6]),
    ("TD607 NCCL transports turned off in code, three spellings", "TD607",
     "os.environ['NCCL_SHM_DISABLE'] = '1'\nos.environ.setdefault('NCCL_P2P_DISABLE', '1')\n"
     "os.environ.update(NCCL_IB_DISABLE='1')\n", [5, 6, 7]),
    ("TD607 NCCL settings that keep the fast paths", "TD607",
     "os.environ['NCCL_SHM_DISABLE'] = '0'\nos.environ['NCCL_DEBUG'] = 'INFO'\nos.environ['NCCL_P2P_LEVEL'] = 'NVL'\n",
     []),
    ("TD704 anomaly mode from a constant", "TD704",
     "DEBUG = True\ntorch.autograd.set_detect_anomaly(DEBUG)\n" + LOOP, [6]),
    ("TD704 gradcheck in a test file without training", "TD704",
     "def test_grad():\n    torch.autograd.gradcheck(f, (x,))\n", []),
    # audit: false positives
    ("TD405 per-layer compile in a setup loop", "TD405",
     "for i, layer in enumerate(model.layers):\n    model.layers[i] = torch.compile(layer)\n"
     "for name, m in models.items():\n    compiled[name] = torch.compile(m)\n", []),
    ("TD405 per-layer compile repeated by an epoch loop", "TD405",
     "for epoch in range(3):\n    for i in range(n):\n        blocks[i] = torch.compile(blocks[i])\n", [7]),
    ("TD405 compiling different models inside the training loop", "TD405",
     "for i, (x, y) in enumerate(loader):\n    m = torch.compile(models[i])\n    m(x).backward()\n"
     "    opt.step()\n", [6]),
    ("TD103 copies to MPS are not CUDA copies", "TD103",
     "loader = DataLoader(ds, num_workers=2)\nfor x in loader:\n    model(x.to('mps')).backward()\n"
     "    opt.step()\n", []),
    ("TD203 token-by-token generation loop", "TD203",
     "@torch.no_grad()\ndef generate(model, x, eos):\n    for _ in range(64):\n        nxt = model(x).argmax(-1)\n"
     "        if nxt.item() == eos:\n            break\n", []),
    ("TD203 range loop drawing evaluation batches", "TD203",
     "@torch.no_grad()\ndef evaluate(model, it, n):\n    for _ in range(n):\n        x = next(it)\n"
     "        print(model(x).cpu())\n", [9]),
    ("TD201 conditional expression behind a modulo", "TD201",
     "for step, x in enumerate(loader):\n    loss = model(x)\n    loss.backward()\n    opt.step()\n"
     "    v = loss.item() if step % 100 == 0 else None\n    w = loss.item() if step % 100 else None\n", [10]),
    # audit: missed findings
    ("TD201 str, %-format and max of a tensor", "TD201",
     LOOP + "    s = str(loss)\n    t = '%s' % loss\n    m = max(loss, 1)\n    n = max(len(x), 1)\n", [9, 10, 11]),
    ("TD201 a modulo by 1 guards nothing", "TD201",
     "for step, x in enumerate(loader):\n    loss = model(x)\n    loss.backward()\n    opt.step()\n"
     "    if step % 1 == 0:\n        print(loss.item())\n", [10]),
    ("TD301 in-place op on each row of a tensor", "TD301",
     "class M(nn.Module):\n    def forward(self, x):\n        for row in x:\n            row.mul_(2)\n"
     "        return x\n", [8]),
    ("TD104 next(it) inside a range loop", "TD104",
     "loader = DataLoader(ds, num_workers=2, pin_memory=True)\nit = iter(loader)\nfor step in range(100):\n"
     "    batch = next(it)\n    x = batch[0].to('cuda')\n    model(x).backward()\n    opt.step()\n", [9]),
    ("TD302 foreach=False in a ** dict", "TD302", "opt = torch.optim.AdamW(params, **{'foreach': False})\n", [5]),
    ("TD303 set_to_none=False in a ** dict", "TD303", "opt.zero_grad(**{'set_to_none': False})\n", [5]),
]


@pytest.mark.parametrize("name, code, snippet, lines", CASES, ids=[c[0] for c in CASES])
def test_rule_decision(tmp_path, name, code, snippet, lines):
    assert lines_of(tmp_path, HEAD + snippet, code) == lines


def test_every_detected_code_has_a_trigger_and_a_non_trigger_here():
    from torchdoctor.rules.registry import detected_codes
    DETECTED_CODES = detected_codes("lint")
    triggers = {c[1] for c in CASES if c[3]}
    silent = {c[1] for c in CASES if not c[3]}
    assert DETECTED_CODES - {"TD603"} <= triggers | silent


def test_severity_reflects_how_often_and_how_sure(tmp_path):
    got = severities(tmp_path, HEAD + "loader = DataLoader(ds, num_workers=2)\nval = DataLoader(ds, num_workers=2)\n"
                     + LOOP + "    x.cuda()\nmodel.eval()\nwith torch.no_grad():\n    for x, y in val:\n"
                     "        model(x.cuda())\n")
    assert got == {("TD103", 5): "medium", ("TD103", 6): "low"}


def test_a_keyword_inside_a_dict_splat_is_reported_but_not_auto_fixed(tmp_path):
    from helpers.lint_files import lint
    result = lint(tmp_path, HEAD + "opt.zero_grad(**{'set_to_none': False})\n")
    assert [(f.code, f.fixable) for f in result.findings] == [("TD303", False)]


def test_a_sync_in_the_loop_that_steps_around_a_micro_batch_loop_is_per_step(tmp_path):
    # gradient accumulation: backward in the inner loop, the step (and the timing sync) in the outer
    assert lines_of(tmp_path, HEAD + "for step in range(100):\n    for micro in range(4):\n"
                    "        model(x).backward()\n    opt.step()\n    torch.cuda.synchronize()\n"
                    "for epoch in range(3):\n    for x in loader:\n        model(x).backward()\n"
                    "        opt.step()\n    torch.cuda.synchronize()\n", "TD204") == [9]


def test_a_value_the_program_acts_on_right_away_is_a_required_read_said_at_info(tmp_path):
    # an action stepped into an environment, a token decoded through a Python table: needed now;
    # a loss kept by a meter, fed back to torch, or used in arithmetic stays a habit
    got = severities(tmp_path, HEAD + """
obs = envs.reset()
for step in range(1000):
    q = model(torch.as_tensor(obs).cuda())
    actions = torch.argmax(q, dim=1).cpu().numpy()
    obs, reward, done, info = envs.step(actions)
    word = vocab[q.argmax().item()]
    buffer.add(obs, actions)
    loss = model(x).mean()
    loss.backward()
    opt.step()
    meter.update(loss.item())
    alpha = loss.exp().item()
    target = torch.tensor([alpha])
    scaled = alpha * 2
    loss_value = loss.item()
    reduced = misc.all_reduce_mean(loss_value)
""")
    # a loss has autograd history: handed to a helper it is a metric, not a decision
    assert got == {("TD201", 9): "info", ("TD201", 11): "info", ("TD201", 16): "medium",
                   ("TD201", 17): "medium", ("TD201", 20): "medium"}


EVALUATE = """
@torch.no_grad()
def evaluate(model, dataset, max_batches=None):
    model.eval()
    loader = DataLoader(dataset, batch_size=100, num_workers=2)
    losses = []
    for i, (x, y) in enumerate(loader):
        losses.append(model(x.to('cuda'), y.to('cuda')).item())
        if max_batches is not None and i >= max_batches:
            break
    return sum(losses) / len(losses)

for step in range(10000):
    model(x).backward()
    opt.step()
    if step % 500 == 0:
        evaluate(model, train_set, max_batches={first})
        evaluate(model, test_set, max_batches={second})
"""


def test_an_evaluation_of_a_handful_of_batches_is_no_per_batch_habit(tmp_path):
    # both callers stop the evaluation after 11 batches: 11 reads and copies per evaluation
    few = HEAD + EVALUATE.format(first=10, second=10)
    assert lines_of(tmp_path, few, "TD203") == [] and lines_of(tmp_path, few, "TD103") == []
    # one caller reads the whole test set
    full = HEAD + EVALUATE.format(first=10, second=None)
    assert lines_of(tmp_path, full, "TD203") == [12] and lines_of(tmp_path, full, "TD103") == [9]


def test_two_splits_of_a_few_evaluation_batches_are_no_habit_but_of_two_hundred_are(tmp_path):
    code = HEAD + """
EVAL_ITERS = {n}
@torch.no_grad()
def estimate_loss():
    for split in ["train", "val"]:
        out = torch.zeros(EVAL_ITERS)
        for k in range(EVAL_ITERS):
            x, y = get_batch(split)
            logits, loss = model(x, y)
            out[k] = loss.item()
    return out.mean()

for step in range(10000):
    model(x).backward()
    opt.step()
    if step % 500 == 0:
        estimate_loss()
"""
    assert lines_of(tmp_path, code.format(n=200), "TD203") == [14]  # 2 x 200 reads per evaluation
    assert lines_of(tmp_path, code.format(n=4), "TD203") == []


TOY = """
class Pairs(torch.utils.data.Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y
    def __getitem__(self, i):
        one = self.x[i]
        return one, self.y[i]{load}
    def __len__(self):
        return len(self.y)

x_train = {features}
y_train = torch.tensor([0, 0, 1])
loader = DataLoader(Pairs(x_train, y_train), batch_size=2, pin_memory=True)
for epoch in range(3):
    for x, y in loader:
        x, y = x.to('cuda'), y.to('cuda')
        model(x).backward()
        opt.step()
"""


def test_a_dataset_that_only_indexes_what_it_holds_is_in_memory_and_literal_numbers_are_tiny(tmp_path):
    literal = HEAD + TOY.format(load="", features="torch.tensor([[-1.2, 3.1], [-0.9, 2.9], [2.3, -1.1]])")
    assert [c for c, _ in found(tmp_path, literal)] == []  # no TD105 (in memory), no TD104 (a few numbers)
    computed = HEAD + TOY.format(load="", features="torch.randn(10000, 512)")
    assert [c for c, _ in found(tmp_path, computed)] == ["TD104"]
    loading = HEAD + TOY.format(load="\n    def load(self, i):\n        return read_image(self.files[i])",
                                features="torch.randn(10000, 512)").replace("one = self.x[i]", "one = self.load(i)")
    assert sorted(c for c, _ in found(tmp_path, loading)) == ["TD104", "TD105"]


def test_a_helper_that_returns_a_read_value_is_reported_where_it_is_called_every_step(tmp_path):
    assert lines_of(tmp_path, HEAD + """
def extract(v):
    return v.data.tolist()

for epoch in range(1000):
    loss = model(x)
    loss.backward()
    opt.step()
    err = extract(loss)[0]
    if epoch % 100 == 0:
        print(extract(loss))
print(extract(model(x)))
""", "TD201") == [13]


GPU_SCRIPT = """
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--tensorcores", type=int, default={default})
args = parser.parse_args()
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(nn.Linear({width}, {width}), nn.ReLU(), nn.Linear({width}, 10)).to(device)
if args.tensorcores:
    torch.set_float32_matmul_precision("high")
for x, y in loader:
    with {context}:
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
    loss.backward()
    opt.step()
"""


def test_tf32_left_off_for_a_matmul_model_on_the_gpu(tmp_path):
    def td403(default=0, width=2048, context="contextlib.nullcontext()", enabling=True):
        code = HEAD + GPU_SCRIPT.format(default=default, width=width, context=context)
        if not enabling:
            code = code.replace('if args.tensorcores:\n    torch.set_float32_matmul_precision("high")\n', "")
        return {line: severity for (code_, line), severity in severities(tmp_path, code).items() if code_ == "TD403"}
    assert td403() == {12: "medium"}  # turned on only with --tensorcores 1: said at its `if`
    assert td403(default=1) == {}  # on by default
    assert td403(enabling=False) == {10: "low"}  # never turned on: said where the GPU is picked
    assert td403(enabling=False, width=64) == {}  # a small MLP is launch-bound, not matmul-bound
    assert td403(enabling=False, context="torch.autocast('cuda', dtype=torch.bfloat16)") == {}
    conv = HEAD + GPU_SCRIPT.format(default=0, width=2048, context="contextlib.nullcontext()").replace(
        "nn.ReLU()", "nn.Conv2d(3, 8, 3)")
    assert not [k for k in severities(tmp_path, conv) if k[0] == "TD403"]  # cuDNN convolutions use TF32 already


def test_a_throughput_function_that_times_one_call_and_returns_is_no_explicit_sync_habit(tmp_path):
    # issue 22 item 9: called once per epoch and in a loop over batch sizes, not in the step
    assert lines_of(tmp_path, HEAD + """
import time
def throughput(model, x):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    model(x)
    torch.cuda.synchronize()
    return x.shape[0] / (time.perf_counter() - t0)
def train(model, loader, opt):
    for x, y in loader:
        nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
        opt.step()
for epoch in range(10):
    train(model, loader, opt)
    print(throughput(model, torch.randn(64, 8, device="cuda")))
for bs in (1, 8, 64):
    print(bs, throughput(model, torch.randn(bs, 8, device="cuda")))
""", "TD204") == []


def test_a_helper_read_that_every_call_runs_each_step_is_reported_once_in_the_helper(tmp_path):
    assert lines_of(tmp_path, HEAD + """
def to_numpy(v):
    return v.detach().cpu().numpy()

for step in range(1000):
    loss = model(x)
    loss.backward()
    opt.step()
    a = to_numpy(loss)
    b = to_numpy(x)
""", "TD201") == [7]


def test_a_gradient_zeroed_in_place_by_hand_every_step_is_td303_low(tmp_path):
    assert severities(tmp_path, HEAD + """
w1 = torch.randn(10, 10, requires_grad=True)
for t in range(500):
    loss = (x.mm(w1) - y).pow(2).sum()
    loss.backward()
    with torch.no_grad():
        w1 -= 1e-3 * w1.grad
        w1.grad.zero_()
        w2.grad.zero_()
w1.grad.zero_()
""") == {("TD303", 12): "low"}  # one finding for the two gradients zeroed side by side


def test_a_loop_that_calls_a_cell_each_turn_gets_the_one_call_fix_not_element_indexing(tmp_path):
    from helpers.lint_files import lint

    result = lint(tmp_path, """
        import torch, torch.nn as nn
        class RNN(nn.Module):
            def __init__(self):
                super().__init__()
                self.cell = nn.RNNCell(8, 8)
            def forward(self, x):
                h = torch.zeros(x.shape[0], 8)
                for t in range(x.shape[1]):
                    h = self.cell(x[:, t], h)
                return h
        model = RNN()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(100):
            model(torch.randn(4, 16, 8)).sum().backward()
            opt.step()
        """)
    (loop,) = [f for f in result.findings if f.code == "TD301"]
    assert "nn.GRU" in loop.finding.fix and "index_copy_" not in loop.finding.fix
