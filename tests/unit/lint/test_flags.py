"""Code behind an option or config field that is off by default is reported at `info` only,
naming what turns it on; a default the file overrides, or an option that picks the device,
decides nothing."""

from helpers.lint_files import lint, severities

TRAIN = """
import argparse
from dataclasses import dataclass
import torch
parser = argparse.ArgumentParser()
{options}
args = parser.parse_args()
{setup}
for x in loader:
    loss = model(x)
    loss.backward()
    opt.step()
    if {test}:
        torch.cuda.synchronize()
"""


def sync_severity(tmp_path, options="", test="True", setup="") -> str | None:
    code = TRAIN.format(options=options, test=test, setup=setup)
    line = code.lstrip("\n").splitlines().index("        torch.cuda.synchronize()") + 1
    return severities(tmp_path, code).get(("TD204", line))


def test_a_store_true_flag_and_a_numeric_default_are_read(tmp_path):
    assert sync_severity(tmp_path, 'parser.add_argument("--sync-step", action="store_true")', "args.sync_step") == "info"
    assert sync_severity(tmp_path, 'parser.add_argument("--no-overlap", action="store_false")',
                         "args.no_overlap") == "medium"
    assert sync_severity(tmp_path, 'parser.add_argument("--ngpu", type=int, default=1)', "args.ngpu > 1") == "info"
    assert sync_severity(tmp_path, 'parser.add_argument("--every", type=int, default="4")', "args.every == 4") == "medium"
    assert sync_severity(tmp_path, 'parser.add_argument("--trace", default=None)', "args.trace is not None") == "info"


def test_the_message_names_the_option_that_turns_it_on(tmp_path):
    result = lint(tmp_path, TRAIN.format(options='parser.add_argument("--sync-step", action="store_true")',
                                         test="args.sync_step and x.is_cuda", setup=""))
    finding = next(f for f in result.findings if f.code == "TD204")
    assert "`--sync-step`, default False" in finding.finding.message
    assert finding.finding.evidence["off_by_default"]


def test_a_default_the_file_overrides_decides_nothing(tmp_path):
    flag = 'parser.add_argument("--sync-step", action="store_true")'
    assert sync_severity(tmp_path, flag, "args.sync_step", setup="args.sync_step = world_size > 1") == "medium"
    assert sync_severity(tmp_path, flag, "args.sync_step", setup="parser.set_defaults(**config)") == "medium"


def test_options_that_pick_the_device_are_not_read_as_off(tmp_path):
    assert sync_severity(tmp_path, 'parser.add_argument("--cuda", action="store_true")', "args.cuda") == "medium"
    assert sync_severity(tmp_path, 'parser.add_argument("--gpu", type=int, default=None)',
                         "args.gpu is not None") == "medium"


def test_config_dataclass_fields_and_the_else_branch(tmp_path):
    setup = "@dataclass\nclass Cfg:\n    debug: bool = False\n    log: bool = True\ncfg = Cfg()"
    assert sync_severity(tmp_path, "", "cfg.debug", setup) == "info"
    assert sync_severity(tmp_path, "", "cfg.log", setup) == "medium"
    assert sync_severity(tmp_path, "", "cfg.debug", setup.replace("cfg = Cfg()", "cfg = Cfg(debug=True)")) == "medium"
    code = TRAIN.format(options="", setup=setup, test="cfg.log") + "    else:\n        torch.cuda.synchronize()\n"
    assert severities(tmp_path, code)[("TD204", len(code.strip("\n").splitlines()))] == "info"


def test_an_option_reaches_the_guard_through_a_constructor_parameter(tmp_path):
    assert severities(tmp_path, """
        import argparse
        import torch.nn as nn
        parser = argparse.ArgumentParser()
        parser.add_argument("--ngpu", type=int, default=1)
        opt = parser.parse_args()
        ngpu = int(opt.ngpu)
        class Net(nn.Module):
            def __init__(self, ngpu):
                super().__init__()
                self.ngpu = ngpu
            def forward(self, x):
                if x.is_cuda and self.ngpu > 1:
                    return nn.parallel.data_parallel(self.main, x, range(self.ngpu))
                return nn.DataParallel(self.main)(x)
        net = Net(ngpu)
    """) == {("TD604", 13): "info", ("TD604", 14): "medium"}


def test_a_model_class_made_only_behind_an_option_off_by_default_is_off_by_default_too(tmp_path):
    code = """
import argparse
import torch
from torch import nn
class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
class RNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = Cell()
    def forward(self, x):
        h = torch.zeros(2, 8)
        hs = []
        for i in range(x.size(1)):
            h = self.cell(x[:, i], h)
            hs.append(h)
        return torch.stack(hs, 1)
class Big(nn.Module):
    def forward(self, x):
        for i in range(x.size(1)):
            x[:, i] = x[:, i] * 2
        return x
parser = argparse.ArgumentParser()
parser.add_argument("--rnn", action="store_true")
args = parser.parse_args()
if args.rnn:
    model = RNN()
else:
    model = Big()
for x in loader:
    model(x).sum().backward()
    opt.step()
"""
    got = severities(tmp_path, code)
    assert got[("TD301", 15)] == "info" and got[("TD301", 22)] == "medium"
    # the same class also made by default: it runs
    got = severities(tmp_path, code.replace("    model = Big()", "    model = RNN()"))
    assert got[("TD301", 15)] == "medium"


CHOICE = """
import argparse
import torch
from torch import nn
class RNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.Linear(16, 8)
    def forward(self, x):
        h = torch.zeros(x.size(0), 8)
        hs = []
        for i in range(x.size(1)):
            h = torch.tanh(self.cell(torch.cat([x[:, i], h], -1)))
            hs.append(h)
        return torch.stack(hs, 1)
class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(8, 8, 3)
    def forward(self, x):
        return self.conv(x)
parser = argparse.ArgumentParser()
parser.add_argument("--arch", default="conv")
args = parser.parse_args()
{pick}
for x in loader:
    model(x).sum().backward()
    opt.step()
"""


def test_a_model_picked_from_named_alternatives_is_no_code_off_by_default(tmp_path):
    # `--arch rnn` is one of the models the script offers: its per-time-step loop runs for whoever picks it
    chain = 'if args.arch == "conv":\n    model = Conv()\nelif args.arch == "rnn":\n    model = RNN()'
    assert severities(tmp_path, CHOICE.format(pick=chain))[("TD301", 11)] == "medium"
    chain = 'if args.arch == "conv":\n    model = Conv()\nelif args.arch in ("rnn", "gru"):\n    model = RNN()'
    assert severities(tmp_path, CHOICE.format(pick=chain))[("TD301", 11)] == "medium"


def test_a_lone_comparison_with_one_string_stays_a_toggle_off_by_default(tmp_path):
    # `if args.arch == "rnn": ... else: ...` reads like `if args.debug:`: nothing shows a set of alternatives
    toggle = 'if args.arch == "rnn":\n    model = RNN()\nelse:\n    model = Conv()'
    assert severities(tmp_path, CHOICE.format(pick=toggle))[("TD301", 11)] == "info"
    # two strings of two different options are no chain either
    mixed = 'if args.arch == "conv":\n    model = Conv()\nelif args.cell == "rnn":\n    model = RNN()'
    assert severities(tmp_path, CHOICE.format(pick=mixed).replace(
        'default="conv")', 'default="conv")\nparser.add_argument("--cell", default="none")'))[("TD301", 11)] == "info"


def test_a_class_handed_around_by_name_may_be_made_anywhere(tmp_path):
    code = """
import argparse
import torch
from torch import nn
class Big(nn.Module):
    def forward(self, x):
        for i in range(x.size(1)):
            x[:, i] = x[:, i] * 2
        return x
parser = argparse.ArgumentParser()
parser.add_argument("--type", default="small")
args = parser.parse_args()
MODELS = {"big": Big}
if args.type == "big":
    model = Big()
else:
    model = MODELS[args.type]()
for x in loader:
    model(x).sum().backward()
    opt.step()
"""
    assert severities(tmp_path, code)[("TD301", 7)] == "medium"
