"""`run` on scripts in the shapes real projects take (issue 12): hand-written optimizers,
closures, host-side tensors next to device tensors, evaluation during warm-up, a hot line no
rule knows, prints after training, code that never runs. Each script is small and our own;
each test checks what the doctor concludes, never a timing threshold."""

import textwrap

import pytest

from torchdoctor.diagnosis.run import analyze
from helpers.measure import measure
from torchdoctor.run.runner import RunRequest


def doctor(tmp_path, source: str, steps: int = 12, warmup: int = 2, files: dict | None = None):
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = measure(RunRequest(target=str(script), warmup=warmup, steps=steps), run_dir)
    assert record.run.error is None, record.run.error
    return record, analyze(record)


def line_of(tmp_path, marker: str, name: str = "train.py") -> int:
    lines = (tmp_path / name).read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if marker in text)


def at(report, code: str, line: int):
    return [f for f in report.findings if f.code == code and f.location and f.location.line == line]


def test_hand_written_sgd_steps_on_backward_and_its_update_loop_is_found(tmp_path):
    record, report = doctor(tmp_path, """
        import torch
        layers = [torch.nn.Linear(32, 32) for _ in range(12)]
        model = torch.nn.Sequential(*layers)
        for it in range(500):
            loss = model(torch.randn(16, 32)).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p.data.add_(p.grad, alpha=-0.01)  # the update
            model.zero_grad()
    """)
    assert record.run.status == "step-limit" and record.run.step_source == "backward"
    assert len(record.steps) == 14 and all(s.micro_batches == 1 for s in record.steps)
    (update,) = at(report, "TD305", line_of(tmp_path, "# the update"))
    assert update.evidence["parameter_updates_per_step"] == 24 and update.severity.value in ("high", "medium")
    assert "torch.optim" in update.fix and not at(report, "TD301", update.location.line)
    assert any("each backward() call counted as one training step" in n for n in report.notes)


def test_lbfgs_closure_parts_add_up_and_the_optimizers_own_read_is_not_blamed(tmp_path):
    record, report = doctor(tmp_path, """
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
        x, y = torch.randn(256, 8), torch.randn(256, 1)
        opt = torch.optim.LBFGS(model.parameters(), max_iter=4)
        for step in range(60):
            def closure():
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                print(f"loss {loss.item():.4f}")  # LBFGS reads this loss itself
                return loss
            opt.step(closure)
    """)
    measured = record.measured_steps
    assert measured and all(s.closure_calls >= 1 for s in measured)
    split = report.summary.split
    parts = (split.data_wait_s + split.forward_and_other_s + split.backward_s + split.optimizer_s
             + split.eval_s + split.checkpoint_s + split.logging_s)
    assert parts == pytest.approx(report.summary.step_time_s, rel=1e-6)  # the parts add up to the mean
    # the forward inside the closure shows as forward (booked as optimizer, it left nothing here)
    assert split.forward_and_other_s > 0 and split.optimizer_s < report.summary.step_time_s - split.backward_s
    reads = at(report, "TD201", line_of(tmp_path, "LBFGS reads this loss itself"))
    assert reads and all(f.severity.value == "info" and "adds no wait" in f.message for f in reads)
    assert any("optimizer.step(closure)" in n for n in report.notes)


def test_host_index_tensors_are_not_device_syncs_but_the_loss_read_is(tmp_path):
    _, report = doctor(tmp_path, """
        import torch
        class Pairs(torch.utils.data.Dataset):
            def __init__(self):
                self.offsets = torch.arange(0, 4096, 8)
                self.x = torch.randn(4096, 16)
            def __len__(self):
                return len(self.offsets)
            def __getitem__(self, i):
                start = self.offsets[i].item()  # the dataset's own index: host memory
                return self.x[start]
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = torch.nn.Linear(16, 1).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = torch.utils.data.DataLoader(Pairs(), batch_size=32)
        table = torch.randn(1024, 16)
        for epoch in range(10):
            for x in loader:
                idx = torch.randint(0, 1024, (24,))
                extra = torch.stack([table[int(i)] for i in idx])  # host loop over a host index
                loss = model(torch.cat([x, extra]).to(device)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                summary = loss.detach().cpu()
                running = float(summary)  # after an explicit .cpu(): host memory
                total = loss.item()  # a device read every step
    """)
    for marker in ("the dataset's own index", "host loop over a host index", "after an explicit .cpu()"):
        assert not at(report, "TD201", line_of(tmp_path, marker)), marker
    (read,) = at(report, "TD201", line_of(tmp_path, "a device read every step"))
    assert read.severity.value == "medium" and "would sync the GPU" in read.title  # a CPU run: a GPU hazard


def test_evaluation_in_warm_up_is_accounted_and_blamed_on_the_loop_line(tmp_path):
    record, report = doctor(tmp_path, """
        import time, torch
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        def evaluate(model):
            model.eval()  # first line inside the evaluation
            with torch.no_grad():
                time.sleep(0.3)
                model(torch.randn(4, 8))
            model.train()
        for step in range(200):
            if step % 5 == 2:
                evaluate(model)  # the loop's call
            loss = model(torch.randn(4, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, steps=10, warmup=3)
    call = line_of(tmp_path, "# the loop's call")
    (evals,) = [p for p in record.phases if p.kind == "eval"]
    assert evals.location.line == call and evals.inner_location.line == line_of(tmp_path, "first line inside")
    assert evals.occurrences[0].after_step == 2  # the first ran in warm-up (3 steps)
    (frequent,) = at(report, "TD701", call)
    assert frequent.evidence["period_steps"] == 5
    wall = next(t for t in report.tables if t.title == "Where the wall time went")
    evaluation = next(row for row in wall.rows if "evaluation" in row[0])
    assert "warm-up" in evaluation[3] and f"train.py:{call}" in evaluation[3]


def test_a_hot_line_no_rule_knows_is_still_shown(tmp_path):
    _, report = doctor(tmp_path, """
        import time, torch
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(200):
            loss = model(torch.randn(4, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.02)  # where the time goes
    """)
    (hot,) = at(report, "TD901", line_of(tmp_path, "where the time goes"))
    share = hot.evidence["share_of_step_time"]  # the severity says how much of the step it is: no fix is known
    assert share > 0.5 and hot.severity.value == ("high" if share >= 0.6 else "medium")
    assert "no torch ops" in hot.message and hot.estimated_speedup is None


def test_a_print_after_training_is_never_logging_overhead(tmp_path):
    _, report = doctor(tmp_path, """
        import torch
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        def fit(steps):
            for step in range(steps):
                loss = model(torch.randn(4, 8)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            return loss
        loss = fit(14)  # ends before the doctor's step limit
        for _ in range(200):
            print(f"final {loss}")  # after the last step
    """, steps=30)
    assert not [f for f in report.findings if f.code == "TD703"]


def test_a_required_read_is_said_so_with_the_batching_fix(tmp_path):
    _, report = doctor(tmp_path, """
        import torch
        policy = torch.nn.Linear(4, 2)
        opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
        class Env:
            def step(self, action):
                return [0.1 * action] * 4, 1.0
        env, state = Env(), [0.0] * 4
        for episode in range(400):
            log_probs = []
            for t in range(20):
                probs = torch.softmax(policy(torch.tensor(state)), dim=-1)
                action = torch.multinomial(probs, 1)
                log_probs.append(torch.log(probs[action]))
                state, reward = env.step(action.item())  # the environment needs a number
            loss = -torch.cat(log_probs).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """)
    (read,) = at(report, "TD201", line_of(tmp_path, "the environment needs a number"))
    assert read.severity.value == "info" and read.evidence["value_needed_on_host"]
    assert "required" in read.message and "batch" in read.fix


def test_static_findings_only_from_code_that_ran(tmp_path):
    record, report = doctor(tmp_path, """
        import torch
        import legacy
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(200):
            legacy.used_step(model, opt)
    """, files={"legacy.py": """
        import torch
        def used_step(model, opt):
            loss = model(torch.randn(4, 8)).pow(2).mean()
            opt.zero_grad(set_to_none=False)  # runs every step
            loss.backward()
            opt.step()
        def never_called(model, loader, opt):
            for x in loader:
                loss = model(x).sum()
                loss.backward()
                opt.step()
                torch.cuda.synchronize()  # never runs
    """})
    lines = {(f.path.rsplit("/", 1)[-1], f.line) for f in record.static_findings}
    assert ("legacy.py", line_of(tmp_path, "# runs every step", "legacy.py")) in lines
    assert ("legacy.py", line_of(tmp_path, "# never runs", "legacy.py")) not in lines


def test_a_habit_the_training_loop_calls_but_the_window_did_not_reach_is_ranked_as_static(tmp_path):
    """The evaluation at the end of an epoch of 200 steps is not reached by a 12-step run: its
    per-batch `.cpu().numpy()` is still a ranked cause, static and low, "not reached"; a helper
    nothing calls stays out."""
    record, report = doctor(tmp_path, """
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        def evaluate(model, loader):
            preds = []
            with torch.no_grad():
                for x, _ in loader:
                    preds.append(model(x).argmax(1).cpu().numpy())  # per batch, at the end of the epoch
            return preds

        def unused(model, loader):
            return [model(x).cpu().numpy() for x, _ in loader]  # never called

        model = torch.nn.Linear(8, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,)))
        for epoch in range(3):
            for step in range(200):
                loss = torch.nn.functional.cross_entropy(model(torch.randn(16, 8)), torch.randint(0, 4, (16,)))
                opt.zero_grad()
                loss.backward()
                opt.step()
            evaluate(model, DataLoader(data, batch_size=16))
    """)
    line = line_of(tmp_path, "at the end of the epoch")
    (ahead,) = at(report, "TD203", line)
    assert ahead.severity.value == "low" and ahead.estimated_speedup is None and ahead.evidence["static"]
    assert ahead.title.startswith("Not reached in this run")
    assert not at(report, "TD203", line_of(tmp_path, "never called"))
