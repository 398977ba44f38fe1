"""Which code runs every training step, every evaluation batch, or in forward."""

import ast
import textwrap

from torchdoctor.lint.facts import Facts


def regions(source: str) -> dict[int, str]:
    """line of every `.item()` call → its region ("step", "eval", "forward", "guarded step", "-")."""
    source = textwrap.dedent(source).lstrip("\n")
    facts = Facts(ast.parse(source), source)
    out = {}
    for call, block in facts.model.calls_named("item"):
        region = facts.context.region(block)
        out[call.lineno] = f"{'guarded ' if region.guarded else ''}{region.kind}" if region.kind else "-"
    return out


def test_a_loop_that_calls_backward_or_step_is_the_training_loop_and_the_epoch_loop_is_not():
    assert regions("""
        for epoch in range(10):
            for x in loader:
                loss = model(x)
                loss.backward()
                opt.step()
                a = loss.item()
            b = loss.item()
        c = loss.item()
    """) == {6: "step", 7: "-", 8: "-"}


def test_the_loop_around_a_training_loop_is_not_an_evaluation_loop_whatever_its_function_is_named():
    assert regions("""
        def test_configs(model, x):
            for config in configs:
                for _ in range(6):
                    model(x).sum().backward()
                    a = x.item()
                b = x.item()
        @torch.no_grad()
        def test_eval(model, loader):
            for x in loader:
                c = model(x).item()
    """) == {5: "step", 6: "-", 10: "eval"}


def test_stepping_through_a_function_call_two_levels_deep_but_not_three():
    assert regions("""
        def update(loss):
            loss.backward()
        def step(x):
            update(model(x))
        def outer(x):
            step(x)
        def deepest(x):
            outer(x)
        for x in loader:
            step(x)
            a = x.item()
        for x in loader:
            deepest(x)
            b = x.item()
    """) == {11: "step", 14: "-"}


def test_functions_called_from_the_step_and_methods_of_a_trainer():
    assert regions("""
        class Trainer:
            def log(self, loss):
                return loss.item()
            def train_step(self, batch):
                loss = self.model(batch)
                loss.backward()
                self.optimizer.step()
                self.log(loss)
                return loss
            def fit(self):
                for batch in self.loader:
                    self.train_step(batch)
    """) == {3: "step"}


def test_modulo_and_first_step_guards_make_code_periodic():
    assert regions("""
        for step, x in enumerate(loader):
            model(x).backward()
            opt.step()
            if step % 100 == 0:
                a = x.item()
            if step % 100:
                b = x.item()
            else:
                c = x.item()
            if step == 0:
                d = x.item()
            if is_debug:
                e = x.item()
    """) == {5: "guarded step", 7: "step", 9: "guarded step", 11: "guarded step", 13: "step"}


def test_scheduler_and_environment_steps_are_not_optimizer_steps():
    assert regions("""
        for epoch in range(10):
            scheduler.step()
            a = x.item()
        while not done:
            obs, reward, done, info = env.step(action)
            b = reward.item()
    """) == {3: "-", 6: "-"}


def test_evaluation_loops_need_no_grad_or_eval_and_a_model_or_loader():
    assert regions("""
        def evaluate(model, loader):
            model.eval()
            for x in loader:
                a = model(x).item()
        @torch.no_grad()
        def predict(model, loader):
            for x in loader:
                b = model(x).item()
        def init(weights):
            with torch.no_grad():
                for w in weights:
                    c = w.item()
        def score(model, data):
            with torch.inference_mode():
                for x in data:
                    d = model(x).item()
    """) == {4: "eval", 8: "eval", 12: "-", 16: "eval"}


def test_forward_and_its_helpers_run_every_step():
    assert regions("""
        class Net(nn.Module):
            def helper(self, x):
                return x.item()
            def forward(self, x):
                self.helper(x)
                return x.sum().item()
        class NotAModel:
            def forward(self, x):
                return x.item()
    """) == {3: "forward", 6: "forward", 9: "forward"}


def test_lightning_hooks_are_step_and_eval_regions():
    assert regions("""
        class Lit(pl.LightningModule):
            def training_step(self, batch, idx):
                return batch.item()
            def validation_step(self, batch, idx):
                return batch.item()
    """) == {3: "step", 5: "eval"}
