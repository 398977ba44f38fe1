"""report.html from a real run: written into the run directory, re-rendered by `report`,
and honest about the script changing or vanishing after the run."""

import html
import json
import re

from torchdoctor.cli import main

SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset


class Regressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)


def train_one_epoch(model, loader, opt, history):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()  # <update> & "step"
        history.append(loss.item())  # <sync> & "quotes"


if __name__ == "__main__":
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(512, 8), torch.randn(512, 1)), batch_size=16)  # <data> & "loader"
    model = Regressor()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    history = []
    for epoch in range(4):
        train_one_epoch(model, loader, opt, history)
"""


def test_report_html_in_the_run_dir_and_on_re_render(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the script under the run's working directory, as a re-render requires
    script = tmp_path / "train_regressor.py"
    script.write_text(SCRIPT)
    out = tmp_path / "run"
    assert main(["run", "--steps", "12", "--warmup", "2", "--out", str(out), str(script)]) == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "train_regressor.py" in page
    report = json.loads((out / "report.json").read_text())
    assert len(re.findall(r'<article class="finding', page)) == len(report["findings"])
    located = [f for f in report["findings"] if f["location"] and f["location"]["path"].endswith(script.name)]
    assert located, "the run should find something in the script"
    assert {s["path"] for s in report["sources"]} == {f["location"]["path"] for f in located}
    line = located[0]["location"]["line"]
    source = SCRIPT.splitlines()[line - 1]
    hit = f'<span class="line hit"><span class="ln">{line}</span>{html.escape(source)}</span>'
    assert "&lt;" in hit and hit in page  # the card shows the very line, escaped

    capsys.readouterr()
    assert main(["report", str(out), "--format", "html"]) == 0
    assert "changed since the run" not in capsys.readouterr().out  # the same file: nothing to say

    script.write_text(SCRIPT.replace(source, source + "  # <edited> after the run"))
    assert main(["report", str(out), "--format", "html"]) == 0
    changed = capsys.readouterr().out
    assert "source not available: the file changed since the run" in changed
    assert "&lt;edited&gt;" not in changed  # never a line the run did not execute

    script.unlink()
    assert main(["report", str(out), "--format", "html"]) == 0
    assert "the file no longer exists" in capsys.readouterr().out
