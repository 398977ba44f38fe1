"""Each CPU-measurable rule: a record that must trigger it and one that must not."""

from factory import call, loader, optimizer, record, sampled, site

from torchdoctor.analysis import analyze
from torchdoctor.record import PhaseStats, Location
from torchdoctor.rules.data import DataLoaderStall, WorkerRespawn
from torchdoctor.rules.facts import RunFacts
from torchdoctor.rules.launch import GradZeroNotNone, OptimizerForeachOff, PythonLoopOps
from torchdoctor.rules.phases import FrequentCheckpoint, FrequentEval, LoggingOverhead
from torchdoctor.rules.sync import DataDependentSync, EvalTransfer, HostSync


def run(rule, rec):
    return rule().check(rec, RunFacts.of(rec))


def test_data_wait_triggers_with_amdahl_estimate():
    rec = record(step_s=0.1, data_wait_s=0.04)
    rec.loaders = [loader()]
    (f,) = run(DataLoaderStall, rec)
    assert f.location.line == 5 and abs(f.estimated_speedup - 0.1 / 0.06) < 1e-3


def test_small_data_wait_does_not_trigger():
    rec = record(step_s=0.1, data_wait_s=0.002)
    rec.loaders = [loader()]
    assert run(DataLoaderStall, rec) == []


def test_worker_restarts_trigger_only_without_persistent_workers():
    rec = record(step_s=0.1)
    rec.loaders = [loader(num_workers=2, iterator_starts_s=[0.2, 0.2, 0.2], first_batch_waits_s=[0.1] * 3,
                          batches=12)]
    (f,) = run(WorkerRespawn, rec)
    assert f.evidence["epochs_started"] == 3 and f.estimated_speedup > 1.5
    rec.loaders[0].persistent_workers = True
    assert run(WorkerRespawn, rec) == []


def test_python_loop_line_triggers_and_layer_loop_does_not():
    rec = sampled(record(step_s=0.1), sites=[site(31, 3 * 768, time_s=0.09), site(40, 3 * 24, time_s=0.01)],
                  line_hits=[(31, 40)], total_samples=100)
    (f,) = run(PythonLoopOps, rec)
    assert f.location.line == 31 and f.evidence["ops_per_step"] == 768
    assert abs(f.evidence["share_of_step_time"] - 0.4) < 1e-6 and f.estimated_speedup > 1.5
    assert "index_copy_" in f.fix


def test_backward_line_with_only_internal_ops_is_not_a_loop():
    rec = sampled(record(), sites=[site(50, 3000, internal=3000, time_s=0.2)])
    assert run(PythonLoopOps, rec) == []


def test_host_sync_every_step_triggers_but_every_n_steps_does_not():
    rec = sampled(record(), calls=[call(20, ".item()", "host-sync", 3)])
    (f,) = run(HostSync, rec)
    assert f.location.line == 20 and f.estimated_speedup is None and "CPU" in f.estimate_basis
    rec = sampled(record(), calls=[call(20, ".item()", "host-sync", 1)])
    assert run(HostSync, rec) == []


def test_data_dependent_and_eval_transfer_use_their_own_windows():
    rec = sampled(record(), calls=[call(15, "__getitem__", "data-dependent", 3),
                                   call(51, ".cpu()", "transfer-d2h", 4, phase="eval")], eval_batches=4)
    assert [f.location.line for f in run(DataDependentSync, rec)] == [15]
    assert [f.location.line for f in run(EvalTransfer, rec)] == [51]
    assert run(HostSync, rec) == []


def test_foreach_off_needs_explicit_false_and_many_tensors():
    rec = record(optimizer_s=0.02)
    rec.optimizers = [optimizer(foreach=False)]
    (f,) = run(OptimizerForeachOff, rec)
    assert f.location.line == 9 and f.severity.value == "medium"
    rec.optimizers = [optimizer(foreach=None)]
    assert run(OptimizerForeachOff, rec) == []


def test_zero_grad_not_none_is_estimated_from_its_time():
    rec = record(step_s=0.1, zero_grad_s=0.02)
    rec.optimizers = [optimizer(zero_grad_set_to_none=False, zero_grad_location=Location("train.py", 12, ""))]
    (f,) = run(GradZeroNotNone, rec)
    assert f.location.line == 12 and abs(f.estimated_speedup - 1.25) < 1e-3
    rec.optimizers[0].zero_grad_set_to_none = True
    assert run(GradZeroNotNone, rec) == []


def test_phase_rules_trigger_on_their_share():
    rec = record(step_s=0.1, eval_s=0.05, checkpoint_s=0.001)
    rec.phases = [PhaseStats("eval", Location("train.py", 30, "validate"), calls=4, total_s=0.4)]
    (f,) = run(FrequentEval, rec)
    assert f.location.line == 30 and f.evidence["share_of_wall_time"] == 0.5
    assert run(FrequentCheckpoint, rec) == [] and run(LoggingOverhead, rec) == []


def test_gpu_rules_are_not_measured_on_cpu_and_never_guess():
    report = analyze(record())
    not_measured = {n.code for n in report.not_measured}
    assert {"TD103", "TD104", "TD402", "TD403", "TD501", "TD801", "TD802"} <= not_measured
    assert all(f.code not in not_measured for f in report.findings)
