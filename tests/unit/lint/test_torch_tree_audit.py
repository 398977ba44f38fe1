"""Patterns the audit of `torchdoctor lint` on PyTorch's own source judged false positives,
each pinned next to the true positive it must keep (the line numbers are of the dedented
snippet, 1-based)."""

from helpers.lint_files import lines_of, severities


# -- TD704 debug-leftover: only where training runs with the aid on ---------------------------------

def test_td704_a_gradcheck_wrapper_is_not_training_but_gradcheck_in_the_step_is(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        def gradcheck(fn, inputs, **kwargs):
            return torch.autograd.gradcheck(fn, inputs, **kwargs)
        for x in loader:
            model(x).backward()
            torch.autograd.gradcheck(model, (x,))
            opt.step()
    """, "TD704") == [6]


def test_td704_a_switch_in_a_file_that_does_not_train_is_a_tool_setting(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        torch.autograd.set_detect_anomaly(True)
        torch.backends.cudnn.deterministic = True
    """, "TD704") == []


def test_td704_a_function_that_switches_on_then_trains_is_reported(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        def train(model, loader, opt):
            for x in loader:
                model(x).backward()
                opt.step()
        def main():
            torch.autograd.set_detect_anomaly(True)
            train(model, loader, opt)
        def helper():
            torch.autograd.set_detect_anomaly(True)
    """, "TD704") == [7]


def test_td704_anomaly_mode_kept_for_its_tracebacks_is_not_a_leftover(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        def trace_joint(fn, args):
            for x in loader:
                with torch.autograd.detect_anomaly(check_nan=False):
                    fn(x).backward()
                with torch.autograd.set_detect_anomaly(True, check_nan=False):
                    fn(x).backward()
                with torch.autograd.detect_anomaly():
                    fn(x).backward()
                opt.step()
    """, "TD704") == [8]


def test_td704_a_context_managers_own_enter_is_not_a_leftover(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        class anomaly:
            def __enter__(self):
                torch.set_anomaly_enabled(True, self.check_nan)
            def __exit__(self, *exc):
                torch.set_anomaly_enabled(False)
        for x in loader:
            model(x).backward()
            opt.step()
            torch.set_anomaly_enabled(True, True)
    """, "TD704") == [10]


def test_td704_deterministic_around_one_call_is_not_but_a_switch_the_step_calls_is(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        def topk_deterministic(x, k):
            try:
                torch.use_deterministic_algorithms(True)
                return torch.topk(x, k)
            finally:
                torch.use_deterministic_algorithms(False)
        def set_deterministic():
            torch.use_deterministic_algorithms(True)
        for x in loader:
            set_deterministic()
            model(x).backward()
            opt.step()
    """, "TD704") == [9]


# -- TD201 host-sync ---------------------------------------------------------------------------------

def test_td201_lazy_logging_arguments_are_formatted_only_for_emitted_records(tmp_path):
    assert lines_of(tmp_path, """
        import logging
        log = logging.getLogger(__name__)
        for x, y in loader:
            loss = model(x)
            loss.backward()
            opt.step()
            log.debug("loss %s", loss)
            log.info("loss %s", loss)
            log.warning("loss %s", loss)
            log.info(f"loss {loss}")
            log.info("loss {}".format(loss))
            log.info("loss %s" % loss)
            print(loss)
    """, "TD201") == [9, 10, 11, 12, 13]


def test_td201_lazy_logging_is_reported_once_the_file_enables_its_level(tmp_path):
    assert lines_of(tmp_path, """
        import logging
        level = logging.DEBUG if verbose else logging.INFO
        logging.basicConfig(level=level)
        for x, y in loader:
            loss = model(x)
            loss.backward()
            opt.step()
            logging.debug("loss %s", loss)
            logging.info("loss %s", loss)
            logging.log(logging.INFO, "loss %s", loss)
    """, "TD201") == [9, 10]


def test_td201_packed_sequence_batch_sizes_live_on_the_cpu(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        from torch import nn
        class RNN(nn.Module):
            def forward(self, input, hx=None):
                batch_sizes = None
                if isinstance(input, PackedSequence):
                    input, batch_sizes, sorted_indices, unsorted_indices = input
                    max_batch_size = int(batch_sizes[0])
                    first = input.batch_sizes[0].item()
                else:
                    max_batch_size = int(input[0])
                return input
            def cell_size(self, input, batch_sizes):
                return int(batch_sizes[0])
    """, "TD201") == [11]


def test_td201_tensors_built_from_shapes_without_a_device_live_on_the_cpu(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        from torch import nn
        class M(nn.Module):
            def forward(self, A):
                n = int(torch.prod(torch.tensor(A.shape[:-2])))
                sizes = torch.tensor([1, 2, 3])
                total = sizes.sum().item()
                on_gpu = torch.tensor(A.shape, device="cuda")
                m = int(on_gpu.prod())
                k = int(torch.as_tensor(A).sum())
                return A
    """, "TD201") == [9, 10]


def test_td201_an_error_message_is_built_only_on_the_way_to_an_exception(tmp_path):
    assert lines_of(tmp_path, """
        for x, y in loader:
            loss = model(x)
            loss.backward()
            opt.step()
            if bad:
                raise RuntimeError(f"values in [{y.min().item()}, {y.max().item()}]")
            assert ok, f"loss {loss}"
            msg = f"loss {loss}"
    """, "TD201") == [8]


# -- TD202 data-dependent-sync ---------------------------------------------------------------------

def test_td202_a_mask_filled_with_a_python_number_is_masked_fill(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        from torch import nn
        class Observer(nn.Module):
            def __init__(self, bins: int = 2048):
                super().__init__()
                self.bins = bins
            def forward(self, x, values):
                buckets = torch.bucketize(x, self.edges) - 1
                buckets[buckets >= self.bins] = self.bins - 1
                buckets[buckets < 0] = 0
                x[x < 0] = float("-inf")
                x[x > 9] = values
                return buckets[buckets > 0]
    """, "TD202") == [12, 13]


# -- TD204 explicit-sync ---------------------------------------------------------------------------

def test_td204_a_benchmark_loop_times_itself_but_a_timed_training_loop_still_pays(tmp_path):
    assert lines_of(tmp_path, """
        import time
        import torch
        def warm_up(a, seconds):
            t0 = time.time()
            while time.time() - t0 < seconds:
                a = a @ a
                torch.cuda.synchronize()
        def bench(fn, runs):
            total = 0.0
            for _ in range(runs):
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                total += start.elapsed_time(end)
            return total
        for x in loader:
            t0 = time.perf_counter()
            model(x).backward()
            opt.step()
            torch.cuda.synchronize()
            print(time.perf_counter() - t0)
        for chunk in range(10):
            torch.cuda.empty_cache()
    """, "TD204") == [22, 25]


def test_td204_a_sync_followed_by_break_runs_once(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        for i in range(torch.cuda.device_count()):
            if torch.cuda.memory_allocated(i) > 0:
                torch.cuda.empty_cache()
                break
        for i in range(torch.cuda.device_count()):
            torch.cuda.empty_cache()
            if i > 2:
                break
    """, "TD204") == [7]


def test_td204_a_sync_in_the_loop_around_a_training_loop_runs_once_per_run(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        def test_configs(self):
            for find_unused in (False, True):
                model = Net()
                for _ in range(6):
                    model(x).sum().backward()
                    torch.cuda.synchronize()
                torch.cuda.synchronize()
    """, "TD204") == [7]


# -- TD301 python-loop-ops ---------------------------------------------------------------------------

def test_td301_a_loop_over_a_list_of_tensors_is_not_a_tensor_dimension(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        from torch import nn
        class M(nn.Module):
            def forward(self, args: list[torch.Tensor], x: torch.Tensor):
                fixed = []
                for idx in range(len(args)):
                    fixed.append(args[idx].contiguous())
                for i in range(len(x)):
                    x[i] = x[i] * 2
                return fixed
    """, "TD301") == [9]


def test_td301_a_recurrence_cannot_be_vectorized_but_a_running_sum_can(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        from torch import nn
        class LSTM(nn.Module):
            def forward(self, x, hidden=None):
                result = []
                for i in range(x.shape[0]):
                    hidden = self.cell(x[i], hidden)
                    result.append(hidden[0])
                total = 0
                for i in range(x.shape[0]):
                    total = total + x[i]
                return torch.stack(result), total
    """, "TD301") == [11]


# -- TD403 no-tf32 -----------------------------------------------------------------------------------

def test_td403_code_that_toggles_tf32_is_not_training_without_it(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        def replay(data_type):
            if data_type == "tf32":
                torch.backends.cuda.matmul.allow_tf32 = True
            else:
                torch.backends.cuda.matmul.allow_tf32 = False
        def benchmark(timer_cls):
            tf32 = timer_cls(stmt="torch.mm(a, b)", setup="torch.backends.cuda.matmul.allow_tf32 = True")
            torch.backends.cuda.matmul.allow_tf32 = False
        def tf32_off():
            old = torch.backends.cuda.matmul.allow_tf32
            try:
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = True
            finally:
                torch.backends.cuda.matmul.allow_tf32 = old
        if fast:
            torch.backends.cudnn.allow_tf32 = True
        else:
            torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    """, "TD403") == [13, 21]


# -- TD603 ddp-config --------------------------------------------------------------------------------

def test_td603_find_unused_parameters_is_a_note_but_tiny_buckets_stay_low(tmp_path):
    got = severities(tmp_path, """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        a = DDP(net, find_unused_parameters=True)
        b = DDP(net, bucket_cap_mb=1)
    """)
    assert got == {("TD603", 3): "info", ("TD603", 4): "low"}


# -- TD201 host-sync: a module moved to the CPU (rerun of the audit, issue 13) ----------------------

def test_td201_cpu_on_a_model_whose_parameters_are_read_next_is_no_tensor_read(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        for inputs, labels in batches():
            loss_fn(m(inputs), labels).backward()
            opt.step()
            grads = [p.grad for p in m.cpu().parameters()]
            on_host = m.cpu().sum()
    """, "TD201") == [6]
