"""Training loops in the shapes real code writes them (backward and step in a helper, an epoch
helper from another module), loops that time themselves, and evaluation in strides."""

from helpers.lint_files import lines_of, severities
from test_context import regions


def test_a_loss_scaler_handed_the_loss_and_the_optimizer_makes_the_training_loop():
    assert regions("""
        def train_one_epoch(model, loader, optimizer, loss_scaler):
            for x, y in loader:
                loss = criterion(model(x), y)
                loss_scaler(loss, optimizer, clip_grad=1.0, parameters=model.parameters())
                a = loss.item()
        def tune(model, optimizer, epoch):
            for epoch in range(90):
                adjust_learning_rate(optimizer, epoch)
                b = model.weight.item()
    """) == {5: "step", 9: "-"}


def test_accelerate_fabric_and_grad_scaler_loops_are_training_loops():
    assert regions("""
        for batch in loader:
            accelerator.backward(model(**batch).loss)
            a = batch.item()
        for x in loader:
            fabric.backward(model(x))
            b = x.item()
        for x in loader:
            scaler.scale(model(x)).backward()
            scaler.step(opt)
            c = x.item()
    """) == {3: "step", 6: "step", 10: "step"}


def test_the_loop_around_a_training_helper_runs_once_per_epoch():
    assert regions("""
        from engine import train_one_epoch
        def fit(model, loader):
            for x in loader:
                model(x).backward()
                opt.step()
        for epoch in range(10):
            train_one_epoch(model, criterion, data_loader_train, optimizer, epoch)
            a = stats.item()
        for epoch in range(10):
            fit(model, data_loader_train)
            b = stats.item()
    """) == {8: "-", 11: "-"}


def test_a_helper_handed_the_criterion_and_the_optimizer_trains_an_epoch():
    """open_lm: `train_one_epoch(model, data, loss, optimizer=...)` where `loss = nn.CrossEntropyLoss()`,
    the criterion, not a loss value: the loop around it runs once per epoch, not once per step."""
    assert regions("""
        import torch
        from open_lm.train import train_one_epoch
        loss = torch.nn.CrossEntropyLoss()
        while not done:
            train_one_epoch(model, data, loss, optimizer=optimizer, scaler=scaler)
            a = scaler.state_dict()["scale"].item()
    """) == {6: "-"}


def test_the_scalers_own_value_is_a_sync_in_the_step_but_not_at_checkpoint_time(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        for epoch in range(3):
            for x in loader:
                scaler.scale(model(x)).backward()
                scaler.step(opt)
                scaler.update()
                scale = scaler.state_dict()["scale"]
                shrinking = scaler.get_scale() < 1
            torch.save({"scaler": scaler.state_dict()}, "ckpt.pt")
    """, "TD201") == [8, 9]


def test_ddp_accumulation_through_a_helper_told_when_to_step(tmp_path):
    code = """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(net)
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y) / accum
            loss_scaler(loss, optimizer, update_grad=(i + 1) % accum == 0)
    """
    assert lines_of(tmp_path, code, "TD601") == [6]
    assert lines_of(tmp_path, code.replace("update_grad=(i + 1) % accum == 0", "clip_grad=1.0"), "TD601") == []


def test_a_loop_that_draws_batches_or_computes_a_loss_is_never_a_benchmark(tmp_path):
    assert severities(tmp_path, """
        import time
        import torch
        @torch.no_grad()
        def validate(model, val_loader):
            for x, y in val_loader:
                t0 = time.time()
                out = model(x)
                torch.cuda.synchronize()
        def forward_timing(model, x):
            for _ in range(50):
                t0 = time.perf_counter()
                model(x)
                torch.cuda.synchronize()
        def loss_timing(model, x, y):
            for _ in range(50):
                t0 = time.perf_counter()
                criterion(model(x), y)
                torch.cuda.synchronize()
    """) == {("TD204", 8): "medium", ("TD204", 18): "low"}


def test_importing_time_does_not_hide_a_sync_in_a_training_loop_that_reads_the_clock(tmp_path):
    code = """
        import torch
        for step in range(100):
            x, y = next(it)
            t0 = time.time()
            loss = criterion(model(x), y)
            loss_scaler(loss, optimizer)
            torch.cuda.synchronize()
    """
    assert severities(tmp_path, code) == {("TD204", 7): "medium"}
    assert severities(tmp_path, code.replace("import torch", "import time\n        import torch")) == {
        ("TD204", 8): "medium"}


def test_a_stride_loop_that_computes_a_loss_is_evaluation_and_a_generation_loop_is_not():
    assert regions("""
        def evaluate(lm, source):
            with torch.no_grad():
                for i in range(0, source.size(0) - 1, 35):
                    data, targets = get_batch(source, i)
                    a = criterion(lm(data), targets).item()
        def generate(lm, token):
            with torch.no_grad():
                for _ in range(100):
                    logits = lm(token)
                    token = torch.multinomial(logits.softmax(-1), 1)
                    b = token.item()
    """) == {5: "eval", 11: "-"}


def test_a_chunked_loop_is_not_an_element_loop(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        for x in loader:
            model(x).backward()
            opt.step()
            for i in range(0, x.shape[0], 16):
                chunk = x[i:i + 16]
            for i in range(x.shape[0]):
                row = x[i]
    """, "TD301") == [8]


def test_a_hand_written_gradient_step_on_weights_made_before_the_loop_makes_the_training_loop():
    assert regions("""
        import torch
        x, y = torch.randn(64, 100), torch.randn(64, 10)
        w1 = torch.randn(100, 10)
        for t in range(500):
            h = x.mm(w1)
            loss = (h - y).pow(2).sum()
            a = loss.item()
            grad_w1 = x.t().mm(2.0 * (h - y))
            w1 -= learning_rate * grad_w1
        for t in range(500):
            total = torch.zeros(1)
            total -= 0.5 * x.sum()
            b = total.item()
    """) == {7: "step", 13: "-"}
