"""Each CPU-measurable rule: a record that must trigger it and one that must not."""

import pytest
from helpers.records import call, loader, loop, optimizer, record, sampled, site

from torchdoctor.diagnosis.run import analyze
from torchdoctor.model.record import Contention, Location, PhaseOccurrence, PhaseStats
from torchdoctor.rules.data import DataLoaderStall, WorkerRespawn
from torchdoctor.rules.facts import RunFacts
from torchdoctor.rules.launch import GradZeroNotNone, OptimizerForeachOff, PythonLoopOps
from torchdoctor.rules.phases import FrequentCheckpoint, FrequentEval, LoggingOverhead
from torchdoctor.rules.sync import DataDependentSync, EvalTransfer, HostSync


def run(rule, rec):
    return rule().check(rec, RunFacts.of(rec))


def _on_cores(rec, cores, threads):
    rec.environment.cpu_count, rec.environment.num_threads = cores, threads
    return rec


def test_data_wait_triggers_with_amdahl_estimate():
    rec = _on_cores(record(step_s=0.1, data_wait_s=0.04), cores=8, threads=4)  # 4 workers fit: all hidden
    rec.loaders = [loader()]
    (f,) = run(DataLoaderStall, rec)
    assert f.location.line == 5 and abs(f.estimated_speedup - 0.1 / 0.06) < 1e-3


def test_a_data_wait_mostly_the_busy_machines_ranks_low():
    """15 % of the step waiting for data, but the loading thread had no CPU 70 % of that time:
    what is left (4.5 %) is under the stall worth ranking; said, low."""
    rec = _on_cores(record(step_s=0.1, data_wait_s=0.015), cores=2, threads=1)
    rec.loaders = [loader(num_workers=4, sampled_wait_s=0.01, sampled_runqueue_s=0.007)]
    (f,) = run(DataLoaderStall, rec)
    assert f.severity.value == "low" and "busy machine" in f.message
    rec.loaders[0].sampled_runqueue_s = 0.0
    assert run(DataLoaderStall, rec)[0].severity.value != "low"


def test_the_loading_cpu_share_says_on_what_share_of_the_wait_it_was_measured():
    """The CPU clock is read in next() on one batch in CPU_EVERY (schema 8): the finding's evidence
    says on what share of the loading time its CPU share was measured; older records: all of it."""
    rec = _on_cores(record(step_s=0.1, data_wait_s=0.04), cores=8, threads=4)
    rec.loaders = [loader(wait_total_s=0.4, wait_cpu_s=0.05, cpu_timed_wait_s=0.1)]
    (f,) = run(DataLoaderStall, rec)
    assert f.evidence["loading_cpu_share"] == 0.5 and f.evidence["loading_cpu_share_measured_on"] == 0.25
    rec.loaders = [loader(wait_total_s=0.4, wait_cpu_s=0.2, cpu_timed_wait_s=None)]
    (f,) = run(DataLoaderStall, rec)
    assert f.evidence["loading_cpu_share"] == 0.5 and f.evidence["loading_cpu_share_measured_on"] == 1.0


def test_small_data_wait_does_not_trigger():
    rec = record(step_s=0.1, data_wait_s=0.002)
    rec.loaders = [loader()]
    assert run(DataLoaderStall, rec) == []


def test_data_wait_on_an_in_memory_tensor_dataset_advises_batched_indexing_not_workers():
    """Workers would pickle each sample's tensors to the main process: for a TensorDataset the
    cost is the per-sample indexing and collation, which batched indexing removes."""
    rec = _on_cores(record(step_s=0.1, data_wait_s=0.02), cores=2, threads=2)
    rec.loaders = [loader(wait_total_s=0.24, wait_cpu_s=0.24, dataset_type="torch.utils.data.dataset.TensorDataset")]
    (f,) = run(DataLoaderStall, rec)
    assert "TensorDataset" in f.message and "BatchSampler" in f.fix and "num_workers" not in f.fix
    assert abs(f.estimated_speedup - 0.1 / 0.08) < 1e-3 and f.estimate_basis.startswith("upper bound")
    rec.loaders = [loader(wait_total_s=0.24, wait_cpu_s=0.24, dataset_type="train.ImageFolderish")]
    (f,) = run(DataLoaderStall, rec)
    assert "BatchSampler" not in f.fix and "TensorDataset" not in f.message


def test_worker_restarts_trigger_only_without_persistent_workers():
    rec = record(step_s=0.1)
    rec.loaders = [loader(num_workers=2, iterator_starts_s=[0.2, 0.2, 0.2], first_batch_waits_s=[0.1] * 3,
                          batches=12)]
    (f,) = run(WorkerRespawn, rec)
    assert f.evidence["epochs_started"] == 3 and f.estimated_speedup > 1.5
    rec.loaders[0].persistent_workers = True
    assert run(WorkerRespawn, rec) == []


def test_data_wait_estimate_counts_the_workers_this_machine_can_run():
    """80 ms of a 100 ms step is loading, on 2 cores. Loading that computes gets one worker,
    which overlaps but cannot split it: no estimate, only the bound. Loading that mostly waits
    gets the fix's 4 workers; its CPU time (10 %) still comes out of the model's cores."""
    rec = _on_cores(record(step_s=0.1, data_wait_s=0.08), cores=2, threads=2)
    rec.loaders = [loader(wait_total_s=1.0, wait_cpu_s=0.9)]
    (f,) = run(DataLoaderStall, rec)
    assert f.estimated_speedup is None and "at most 1.25x before worker overheads" in f.estimate_basis
    assert f.severity.value == "high"  # the stall itself is 80 % of the step
    assert "90% of that time was CPU work" in f.message and f.evidence["workers_for_fix"] == 1
    rec.loaders = [loader(wait_total_s=1.0, wait_cpu_s=0.1)]
    (f,) = run(DataLoaderStall, rec)
    assert f.evidence["workers_for_fix"] == 4 and "rest waited" in f.message
    # step = max(20 ms compute + 80 ms * 10 % / 2 cores, 80 ms / 4 workers) = 24 ms
    assert abs(f.estimated_speedup - 0.1 / 0.024) < 1e-3 and "4.0 ms of loading CPU" in f.estimate_basis
    rec.environment.cuda_used = True  # on a GPU run the model leaves the cores to the workers
    (f,) = run(DataLoaderStall, rec)
    assert abs(f.estimated_speedup - 0.1 / 0.02) < 1e-3


def test_data_wait_with_as_many_workers_as_can_run_is_not_estimated():
    rec = _on_cores(record(step_s=0.1, data_wait_s=0.05), cores=2, threads=1)
    rec.loaders = [loader(num_workers=2, persistent_workers=True, iterator_starts_s=[0.0])]
    (f,) = run(DataLoaderStall, rec)
    assert f.estimated_speedup is None and "make `__getitem__` cheaper" in f.estimate_basis
    assert f.evidence["speedup_if_fully_hidden"] == 2.0


def test_worker_restart_estimate_is_the_excess_of_the_steps_fresh_workers_serve():
    """Epochs of 3 steps with 2 workers restarted each time: the first step takes 40 ms, the
    second (served by the other fresh worker) 4 ms, the third, undisturbed, 2 ms."""
    rec = record(step_s=0.002, steps=12, warmup=0)
    for s in rec.steps:
        position = (s.index - 1) % 3
        s.end = s.start + (0.040, 0.004, 0.002)[position]
        if position == 0:
            s.eval_s = 0.005  # an evaluation before the epoch: TD701's time, not TD102's
    rec.loaders = [loader(num_workers=2, iterator_starts_s=[0.01] * 4, first_batch_waits_s=[0.005] * 4,
                          epoch_start_steps=[0, 3, 6, 9], batches=12)]
    (f,) = run(WorkerRespawn, rec)
    mean_step = (4 * 0.040 + 4 * 0.004 + 4 * 0.002) / 12
    # over the 2 ms undisturbed step: 33 ms + 2 ms per epoch, less the 5 ms first-batch wait
    # that persistent workers still pay
    saved = 4 * (0.033 + 0.002 - 0.005) / 12
    assert abs(f.estimated_speedup - mean_step / (mean_step - saved)) < 1e-3
    assert "steps that start an epoch" in f.estimate_basis


def test_a_loop_over_data_triggers_at_its_busiest_line():
    """768 slice writes per step from 64 turns of a loop that reads no weights: the reference
    report's prompt loop. Its share comes from the line sampler (40 % of the step)."""
    rec = sampled(record(step_s=0.1), loops=[loop(31, 30, 3 * 768, 3 * 64, time_s=0.09)],
                  line_hits=[(31, 40)], total_samples=100)
    (f,) = run(PythonLoopOps, rec)
    assert (f.location.line, f.evidence["loop_line"], f.evidence["ops_per_step"], f.evidence["turns_per_step"]) == \
        (31, 30, 768, 64)
    assert abs(f.evidence["share_of_step_time"] - 0.4) < 1e-6 and f.estimated_speedup > 1.5
    assert "index_copy_" in f.fix and f.severity.value in ("high", "medium")


def _backward_timed(rec, loop_s: float, step_s: float):
    """`rec` with its loop line's backward timed by the node hooks (`loop_s`, one window) and every
    step's whole backward() at `step_s`."""
    rec.dispatch.backward_windows = 1
    rec.dispatch.sites = [site(31, 3 * 768)]
    rec.dispatch.sites[0].backward_s = loop_s
    for s in rec.steps:
        s.backward_s = step_s
    return rec


def test_a_loops_backward_is_never_more_than_the_clean_steps_whole_backward():
    """The node hooks that time the loop's backward slow it (5,376 nodes a step): measured at 0.9 s
    in a 0.1 s step whose backward() takes 60 ms in the clean steps. The estimate uses at most
    those 60 ms, not a backward longer than the step."""
    rec = _backward_timed(sampled(record(step_s=0.1), loops=[loop(31, 30, 3 * 768, 3 * 64, time_s=0.09)],
                                  line_hits=[(31, 10)], total_samples=100), loop_s=0.9, step_s=0.06)
    (f,) = run(PythonLoopOps, rec)
    assert f.evidence["backward_ms_per_step"] == 60.0
    assert abs(f.evidence["share_of_step_time"] - 0.7) < 1e-6  # 10 ms forward + 60 ms backward of 100 ms


def _slowed(rec, slow_steps: int, slow_s: float):
    """`rec` with its last `slow_steps` measured steps taking `slow_s` each (another process had the
    CPU: 3.5 s and 5.7 s among 0.29 s steps in a loaded demo run), the others unchanged."""
    for s in rec.steps[-slow_steps:]:
        s.end = s.start + slow_s
    return rec


def test_a_loop_is_sized_on_the_median_step_that_slow_steps_do_not_pull_up():
    """The loop's ops timed at 30 ms in its window step, the median step 100 ms: 30 % of the step,
    high. Two of the ten measured steps slowed to 1 s by a busy machine pull the mean to 280 ms,
    where the same 30 ms read 11 %, a medium (the demo's TD301 ranked third on a loaded machine):
    the estimate is sized on the median and says how far the mean is pulled up."""
    rec = _slowed(sampled(record(step_s=0.1), loops=[loop(31, 30, 3 * 768, 3 * 64, time_s=0.09)]), 2, 1.0)
    facts = RunFacts.of(rec)
    assert abs(facts.step_s - 0.28) < 1e-9 and abs(facts.median_step_s - 0.1) < 1e-9
    (f,) = run(PythonLoopOps, rec)
    assert f.evidence["step_ms"] == 100.0 and abs(f.evidence["share_of_step_time"] - 0.3) < 1e-6
    assert f.severity.value == "high" and f.estimated_speedup >= 1.25
    assert "of a 100.0 ms step" in f.message
    assert "Amdahl on the median measured step, 100.0 ms (the mean step, 280.0 ms, is 2.8x it" in f.estimate_basis
    steady = sampled(record(step_s=0.1), loops=[loop(31, 30, 3 * 768, 3 * 64, time_s=0.09)])
    (g,) = run(PythonLoopOps, steady)  # steady steps: the same estimate, and no word about the mean
    assert g.estimated_speedup == f.estimated_speedup and "the mean step" not in g.estimate_basis


def test_a_loop_under_the_noise_of_its_median_step_stays_low():
    """The median sizes a small loop small too: 2 ms of a 100 ms median step is under LOOP_MIN_SHARE,
    low and unestimated, however the slow steps move the mean."""
    rec = _slowed(sampled(record(step_s=0.1), loops=[loop(31, 30, 3 * 768, 3 * 64, time_s=0.006)]), 2, 1.0)
    (f,) = run(PythonLoopOps, rec)
    assert f.severity.value == "low" and f.estimated_speedup is None


def test_a_loop_whose_forward_nothing_timed_says_so_instead_of_zero():
    """A busy machine: the line sampler kept no whole step and the op sampler's calibrated cost took
    all the time it timed on the loop (a loaded demo run: 5,376 ops, 0.0 ms left). Its forward is
    unmeasured, not 0 ms; the estimate rests on the backward the node hooks timed and says so."""
    rec = _backward_timed(sampled(record(step_s=0.1), loops=[loop(31, 30, 3 * 768, 3 * 64, time_s=0.0)]),
                          loop_s=0.04, step_s=0.06)
    (f,) = run(PythonLoopOps, rec)
    assert "forward time was not measured" in f.message and "taking 0.0 ms" not in f.message
    assert "not timed:" in f.estimate_basis and "node hooks" in f.estimate_basis
    assert f.estimated_speedup is not None and f.severity.value == "high"  # 40 ms of backward in a 100 ms step


def test_a_loop_nothing_timed_is_said_unmeasured_not_0_percent():
    """Neither its forward nor its backward timed: not '0.0% of step time, within its noise'
    (nothing measured 0 %); said with what was measured (its op count), unestimated, and low: a
    severity is not made up from no timing."""
    rec = sampled(record(step_s=0.1), loops=[loop(31, 30, 3 * 768, 3 * 64, time_s=0.0)])
    (f,) = run(PythonLoopOps, rec)
    assert f.estimated_speedup is None and f.severity.value == "low"
    assert f.title.endswith("(its time not measured)") and "0.0%" not in f.title
    assert "neither its forward nor its backward was timed" in f.estimate_basis
    assert "within its noise" not in f.estimate_basis and "nor their backward" in f.message


def test_a_small_share_on_a_busy_machine_is_its_noise_not_the_loops_measure():
    """768 ops per step at 2 % of the step: low on a machine the run found quiet (within a CPU
    run's noise); medium and unestimated on one it found busy (other processes waited it for a CPU
    40 % of the time), where the loop's share is that noise's: a demo run whose steps took 80x the
    quiet ones timed the prompt loop at 2.4 % of them, 49 % on a quiet machine."""
    rec = sampled(record(step_s=0.1), loops=[loop(31, 30, 3 * 768, 3 * 64, time_s=0.006)])
    (quiet,) = run(PythonLoopOps, rec)
    assert quiet.severity.value == "low" and quiet.estimated_speedup is None
    rec.contention = Contention(window_s=2.0, thread_runqueue_s=0.8, load_start=3.5, load_end=3.9, cpus=2)
    (busy,) = run(PythonLoopOps, rec)
    assert busy.severity.value == "medium" and busy.estimated_speedup is None
    assert "on a machine this run found busy" in busy.estimate_basis and "768 ops per step" in busy.estimate_basis
    few = sampled(record(step_s=0.1), loops=[loop(31, 30, 3 * 24, 3 * 12, time_s=0.0002)])  # 24 ops a step
    few.contention = rec.contention
    assert run(PythonLoopOps, few)[0].severity.value == "low"  # under LOOP_OPS_PER_STEP: low, busy or not


def test_a_recurrent_loop_reusing_its_weights_is_a_loop_over_time():
    """An RNN cell called once per position (16 turns per step, the same 3 weights every turn):
    its ops are counted in the caller's loop, lines of the cell included."""
    rnn = loop(332, 330, 3 * 80, 3 * 16, param_uses=3 * 48, params=3, lines=[331, 332, 273, 274])
    rnn.internal_ops = 3 * 60  # inside the cell module it calls
    rec = sampled(record(step_s=0.1), loops=[rnn], line_hits=[(331, 5), (273, 10), (274, 15)], total_samples=100)
    (f,) = run(PythonLoopOps, rec)
    assert f.location.line == 332 and abs(f.evidence["share_of_step_time"] - 0.3) < 1e-6
    assert "vmap" in f.fix and "index_copy_" not in f.fix  # one call on the batch, not element indexing


def test_a_stack_of_layers_a_framework_loop_and_the_training_loop_are_not_td301():
    layers = loop(147, 146, 3 * 120, 3 * 4, param_uses=3 * 24, params=24)  # each turn reads other weights
    layers.runs = 3 * 2  # two micro-batches per step: each weight read twice a step, once a run
    framework = loop(40, 38, 3 * 500, 3 * 25, library="ignite")  # the user cannot rewrite it
    training = loop(60, 55, 3 * 900, 3)  # one turn per step
    tiny = loop(74, 74, 3 * 24, 3 * 12)  # `(t.view(...) for t in (q, k, v))`: one turn per run, 12 runs
    tiny.runs = 3 * 12
    few = loop(70, 69, 3 * 6, 3 * 3)  # 6 ops per step: nothing to gain
    rec = sampled(record(step_s=0.1), loops=[layers, framework, training, few, tiny], line_hits=[(147, 30), (40, 30)],
                  total_samples=100)
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


def test_a_hot_line_with_few_torch_ops_says_how_long_they_took():
    """40 % of a 100 ms step on line 12, whose sampled ops took 6 ms per step: not compute."""
    from torchdoctor.rules.hot_lines import HotLine

    rec = sampled(record(step_s=0.1), windows=3, sites=[site(12, ops=30, time_s=0.018)],
                  line_hits=[(12, 40)], total_samples=100)
    (f,) = run(HotLine, rec)
    assert f.location.line == 12 and f.evidence["op_ms_per_step"] == 6.0
    assert "its torch ops took 6.00 ms per step" in f.message
    rec.line_profile.lines[0].location = Location("train.py", 13, "f")  # no op sampled at this line
    (f,) = run(HotLine, rec)
    assert f.evidence["op_ms_per_step"] == 0.0 and "issued no torch ops" in f.message


def test_a_read_of_a_decision_is_information_and_a_read_of_the_loss_is_a_habit():
    """An RL loop reads the sampled action every environment step (no autograd history): the
    host acts on it, the sync is the price; the loss read every step is the habit to drop."""
    action = call(46, ".item()", "host-sync", 3 * 22, autograd=0, integer=3 * 22)
    action.text = "return action.item()"
    loss = call(60, ".item()", "host-sync", 3, autograd=3, integer=0)
    loss.text = "return loss.item()"
    accuracy = call(66, ".item()", "host-sync", 3, autograd=0, integer=0)  # a per-step metric, no history
    accuracy.text = "acc = (logits.argmax(1) == y).float().mean().item()"
    found = {f.location.line: f for f in run(HostSync, sampled(record(), calls=[action, loss, accuracy]))}
    assert found[46].severity.value == "info" and found[46].evidence["value_needed_on_host"]
    assert "host needs the value" in found[46].title and "vectorized environments" in found[46].message
    assert found[60].severity.value == "medium" and not found[60].evidence["value_needed_on_host"]
    assert found[66].severity.value == "medium"  # read once a step, and not a whole number: the habit


def test_a_line_read_as_a_device_tensor_in_some_steps_is_a_per_step_sync():
    """nanochat's `train_loss.item()` (out of a compiled model) was placed on the device in two
    sampled steps and on the host in the third: one line, one value, read every step. A line whose
    reads were all of host tensors stays out."""
    on_device = call(541, ".item()", "host-sync", 2, autograd=0, integer=0)
    on_host = call(541, ".item()", "host-sync", 1, autograd=0, integer=0)
    on_host.placement = "host"
    (f,) = run(HostSync, sampled(record(), calls=[on_device, on_host]))
    assert f.location.line == 541 and f.severity.value == "medium"
    on_device.placement = "host"
    assert run(HostSync, sampled(record(), calls=[on_device, on_host])) == []


def test_the_op_samplers_time_in_the_first_evaluation_is_not_the_evaluations():
    """The doctor samples the first evaluation's first batches: on 0.2 ms training steps its slowdown
    there (2.5x on training steps) made a 9 ms evaluation look 130 steps long, a medium TD701 in a case
    built to have none (CI, the first test of the suite). What it added is left out."""
    from torchdoctor.model.record import DoctorCost, ProbeCost

    rec = record(step_s=0.0002)
    rec.phases = [PhaseStats("eval", Location("train.py", 12, "<module>"), calls=1, total_s=0.026,
                             occurrences=[PhaseOccurrence(after_step=0, t=0.1, seconds=0.026)])]
    (f,) = run(FrequentEval, rec)  # sized with the sampler's time in it: 130 steps' worth
    assert f.severity.value == "medium"
    rec.doctor_cost = DoctorCost(probes=[ProbeCost("sampler", "op sampler", step_ratio=2.5),
                                         ProbeCost("eval_sampler", "op sampler (evaluation)", active_s=0.025)])
    (f,) = run(FrequentEval, rec)  # 0.026 - 0.025 * (1 - 1/2.5) = 0.011 s: 55 steps' worth
    assert f.severity.value == "low" and abs(f.evidence["seconds_each"] - 0.011) < 1e-6
    assert f.evidence["doctor_sampling_s_left_out"] == 0.015 and "slowed it by an estimated 15.0 ms" in f.message


def test_an_evaluation_seen_once_is_said_in_training_steps_without_a_share():
    """`if it % 300 == 0: estimate_loss()` runs at iteration 0 only in a bounded run: 2.4 s
    against 10 ms steps. Its period is not measured, so no share is claimed; after the last
    step (a final test) it is no finding at all."""
    rec = record(step_s=0.01)
    rec.phases = [PhaseStats("eval", Location("train.py", 107, "<module>"), calls=1, total_s=2.4,
                             occurrences=[PhaseOccurrence(after_step=0, t=0.1, seconds=2.4)])]
    (f,) = run(FrequentEval, rec)
    assert f.location.line == 107 and f.estimated_speedup is None and f.severity.value == "medium"
    assert f.evidence["training_steps_worth"] == 240 and "not measured" in f.message
    rec.phases[0].occurrences[0].after_step = len(rec.steps)
    assert run(FrequentEval, rec) == []


def test_eval_reads_without_a_dataloader_are_judged_within_the_evaluation():
    """`for k in range(200): losses[k] = loss.item()` over get_batch() (no DataLoader batches
    counted): read 200 times in one evaluation, per batch; a one-batch test set reads once,
    but inside the loop; one read after the loop is the pattern the fix recommends."""
    per_batch = call(55, ".item()", "host-sync", 200, phase="eval")
    few = call(60, ".item()", "host-sync", 16, phase="eval")  # 16 reads an evaluation: little to gain
    one_batch = call(70, ".cpu()", "transfer-d2h", 1, phase="eval")
    one_batch.loop_line = 68
    after_loop = call(80, ".item()", "host-sync", 1, phase="eval")
    rec = sampled(record(), calls=[per_batch, few, one_batch, after_loop], eval_batches=0)
    found = {f.location.line: f for f in run(EvalTransfer, rec)}
    assert set(found) == {55, 60, 70} and "in one evaluation" in found[55].title
    assert [found[n].severity.value for n in (55, 60, 70)] == ["medium", "low", "low"]
    # `for net in nets: net.eval(); loss(net(x)).item()`: the loop holds the evaluations, one read each
    rec.phases = [PhaseStats("eval", Location("train.py", 69, "f"), inner_location=Location("train.py", 69, "f"))]
    assert {f.location.line for f in run(EvalTransfer, rec)} == {55, 60}


def test_a_target_network_updated_tensor_by_tensor_is_td305_not_td301():
    """SAC's soft update: one `tgt.data.copy_(tau * p.data + (1 - tau) * tgt.data)` per turn,
    8 tensors per step, each turn reading a parameter: TD305 at the loop, and no TD301."""
    from torchdoctor.rules.launch import PerParameterUpdate

    update = loop(301, 300, 3 * 32, 3 * 8, param_uses=3 * 8, params=8)
    update.inplace_writes, update.written_tensors = 3 * 8, 8
    rec = sampled(record(step_s=0.01), loops=[update])
    (f,) = run(PerParameterUpdate, rec)
    assert (f.location.line, f.evidence["tensors_written"]) == (301, 8) and "_foreach_lerp_" in f.fix
    assert run(PythonLoopOps, rec) == []


def test_an_optimizer_classes_own_loop_over_its_parameters_is_not_td301():
    """nanochat's MuonAdamW fills six 0-d hyperparameter tensors per parameter before one compiled
    kernel each: a loop over the optimizer's parameters, by design; the same loop in a plain
    function of the script is still a loop of tiny ops."""
    fills = loop(345, 323, 3 * 48, 3 * 8, time_s=0.0075)
    fills.location = Location("nanochat/optim.py", 345, "MuonAdamW._compute_adamw")
    fills.inplace_writes, fills.written_tensors = 3 * 48, 6
    rec = sampled(record(step_s=0.04), loops=[fills], line_hits=[(345, 30)], total_samples=300)
    rec.line_profile.lines[0].location = fills.location
    rec.optimizers = [optimizer(class_name="MuonAdamW")]
    assert run(PythonLoopOps, rec) == []
    rec.optimizers = [optimizer(class_name="AdamW")]
    assert [f.code for f in run(PythonLoopOps, rec)] == ["TD301"]


def test_the_training_loop_is_not_td301_even_when_it_turns_several_times_per_step():
    """An RL loop steps the environment ten times per optimizer step: the loop around the
    step() call turns 10x per step and issues the policy's ops; it is the training loop."""
    env_loop = loop(212, 205, 3 * 440, 3 * 10)
    rec = sampled(record(step_s=0.01), loops=[env_loop], line_hits=[(212, 50)], total_samples=100)
    assert [f.code for f in run(PythonLoopOps, rec)] == ["TD301"]
    rec.run.training_loops = [Location("train.py", 205, "f")]
    assert run(PythonLoopOps, rec) == []


def test_a_hot_line_inside_a_library_is_reported_at_the_users_call_and_ranked_by_its_share():
    """`plt.pause(0.1)` sleeps inside matplotlib: 60 % of the step is the library's line, whose
    caller is the user's line 60 (then high: half the step); the loader's next() line is TD101's."""
    from torchdoctor.model.record import LineHits
    from torchdoctor.rules.hot_lines import HotLine

    rec = sampled(record(step_s=0.1), windows=3, total_samples=100)
    rec.line_profile.total_s = 1.0
    rec.line_profile.lines = [
        LineHits(Location("/site/matplotlib/backend_bases.py", 2470, "start_event_loop"), 60,
                 text="time.sleep(timestep)", library="matplotlib", seconds=0.6,
                 called_from=Location("train.py", 60, "<module>")),
        LineHits(Location("train.py", 30, "<module>"), 30, text="batch = next(it)", seconds=0.3)]
    rec.loaders = [loader(iterated_at=Location("train.py", 30, "<module>"))]
    (f,) = run(HotLine, rec)
    assert (f.location.line, f.severity.value) == (60, "high") and "inside matplotlib" in f.title


def test_a_forward_line_busy_in_the_evaluation_is_not_a_training_hot_line():
    """The model's forward line runs in training and in the evaluation every N steps: its samples
    inside the evaluation are the evaluation's (TD701), not a hot line of the step."""
    from torchdoctor.model.record import LineHits
    from torchdoctor.rules.hot_lines import HotLine

    rec = sampled(record(step_s=0.1), windows=3, total_samples=100)
    rec.line_profile.total_s = 1.0
    rec.line_profile.lines = [LineHits(Location("train.py", 43, "forward"), 40, text="return self.mlp(x)",
                                       seconds=0.4, eval_samples=32)]
    assert run(HotLine, rec) == []  # 40 % of the time, but only 8 % of it training
    rec.line_profile.lines[0].eval_samples = 0
    assert [f.severity.value for f in run(HotLine, rec)] == ["medium"]


def test_a_figure_drawn_once_in_the_window_is_said_in_training_steps():
    """`if step % 50 == 0: plt.cla(); ...; plt.pause(0.1)` drew once, at step 0, in a 30-step run:
    0.5 s against 10 ms steps, as long as 50 steps; its period is not measured."""
    rec = record(step_s=0.01)
    rec.phases = [PhaseStats("logging", Location("gan.py", 81, "<module>"), calls=1, total_s=0.5,
                             occurrences=[PhaseOccurrence(after_step=0, t=0.1, seconds=0.5)])]
    (f,) = run(LoggingOverhead, rec)
    assert (f.location.line, f.severity.value, f.estimated_speedup) == (81, "low", None)
    assert f.evidence["training_steps_worth"] == 50 and f.title.startswith("One print or plot took")


def test_figures_drawn_once_an_epoch_are_sized_per_interval():
    """36 histograms and a `plt.pause` at every epoch start (every 32 steps), 0.3 s each time,
    against 10 ms steps: about half the wall time, found from the two occurrences."""
    rec = record(step_s=0.01)
    rec.phases = [PhaseStats("logging", Location("bn.py", 133, "<module>"), calls=2, total_s=0.6,
                             occurrences=[PhaseOccurrence(after_step=0, t=0.1, seconds=0.3),
                                          PhaseOccurrence(after_step=32, t=0.7, seconds=0.3)])]
    (f,) = run(LoggingOverhead, rec)
    assert f.location.line == 133 and f.evidence["period_steps"] == 32 and 0.4 < f.evidence["share_of_wall_time"] < 0.5


def test_a_print_whose_line_has_a_finding_is_not_costed_again_per_interval():
    """`print(t, loss.item())` every step: the line's TD201 finding is the habit; the print's own
    occurrences must not come back as a second finding through the per-interval path."""
    from torchdoctor.model.findings import Finding, Severity

    rec = record(step_s=0.01)
    rec.phases = [PhaseStats("logging", Location("optim.py", 43, "<module>"), calls=30, total_s=0.3,
                             occurrences=[PhaseOccurrence(after_step=i, t=0.1 * i, seconds=0.01) for i in range(30)])]
    assert [f.location.line for f in run(LoggingOverhead, rec)] == [43]  # alone, it is a finding
    facts = RunFacts.of(rec)
    facts.earlier = [Finding("TD201", "host-sync", Severity.MEDIUM, "t", "m", Location("optim.py", 43, "<module>"),
                             {}, "", None, "")]
    assert LoggingOverhead().check(rec, facts) == []


def test_a_hot_line_from_a_handful_of_samples_is_not_claimed():
    """6 of 21 samples on a line say 29 % of the step, but as well 18 %: not a finding; a quarter
    from 200 samples is."""
    from torchdoctor.rules.hot_lines import HotLine

    rec = sampled(record(step_s=0.1), windows=3, line_hits=[(36, 6)], total_samples=21)
    assert run(HotLine, rec) == []
    rec = sampled(record(step_s=0.1), windows=3, line_hits=[(36, 50)], total_samples=200)
    assert [f.location.line for f in run(HotLine, rec)] == [36]


def test_ops_in_the_users_own_cell_function_count_as_called_ops():
    """makemore's RNN: the loop in RNN.forward calls RNNCell.forward, a function of the user's,
    whose lines issue most of the ops (only a third inside torch): one call on the batch, or a
    fused cell, is the fix, not element indexing."""
    rnn = loop(332, 330, 3 * 96, 3 * 16, param_uses=3 * 48, params=3, lines=[331, 273, 274])
    rnn.location = Location("train.py", 332, "RNN.forward")
    rnn.lines = [Location("train.py", 331, "RNN.forward"), Location("train.py", 273, "RNNCell.forward"),
                 Location("train.py", 274, "RNNCell.forward")]
    rnn.internal_ops = 3 * 32
    rec = sampled(record(step_s=0.1), loops=[rnn], line_hits=[(331, 5), (273, 10), (274, 15)], total_samples=100,
                  sites=[site(331, 3 * 16), site(273, 3 * 16), site(274, 3 * 64, internal=3 * 32)])
    for s, function in zip(rec.dispatch.sites, ("RNN.forward", "RNNCell.forward", "RNNCell.forward")):
        s.location = Location("train.py", s.location.line, function)
    (f,) = run(PythonLoopOps, rec)
    assert "vmap" in f.fix and "index_copy_" not in f.fix and "inside the functions and modules it calls" in f.message


def test_a_print_that_formats_a_tensor_is_still_costed_beside_its_sync_finding():
    """`print(f"loss {loss} grad {w.grad}")`: TD201 says the formatting would sync a GPU; on a CPU
    the formatting is the print's own measured cost, so TD703 still sizes it."""
    from torchdoctor.model.findings import Finding, Severity

    rec = record(step_s=0.01)
    rec.phases = [PhaseStats("logging", Location("train.py", 33, "<module>"), calls=30, total_s=0.3,
                             occurrences=[PhaseOccurrence(after_step=i, t=0.1 * i, seconds=0.01) for i in range(30)])]
    facts = RunFacts.of(rec)
    sync = Finding("TD201", "host-sync", Severity.MEDIUM, "t", "m", Location("train.py", 33, "<module>"),
                   {"apis": ["__format__"]}, "", None, "")
    facts.earlier = [sync]
    assert [f.location.line for f in LoggingOverhead().check(rec, facts)] == [33]
    sync.evidence["apis"] = ["__format__", ".item()"]  # an .item() read too: the line's finding is the sync
    assert LoggingOverhead().check(rec, facts) == []


def test_one_slow_print_among_fast_ones_is_not_the_rate():
    """Six prints in 30 steps of 1 ms: the first took 4.5 ms (its first write to a pipe), the others
    70 µs. At the typical call time printing is ~1.4 % of the steps, not 16 %: no finding."""
    rec = record(step_s=0.001, steps=30)
    seconds = [0.0045] + [0.00007] * 5
    rec.phases = [PhaseStats("logging", Location("main.py", 45, "<module>"), calls=6, total_s=sum(seconds),
                             in_measured_steps_s=sum(seconds), calls_in_measured=6,
                             occurrences=[PhaseOccurrence(after_step=5 * (i + 1), t=0.005 * (i + 1), seconds=s)
                                          for i, s in enumerate(seconds)])]
    assert run(LoggingOverhead, rec) == []
    for occurrence in rec.phases[0].occurrences:  # every print that slow: a real cost
        occurrence.seconds = 0.0045
    rec.phases[0].in_measured_steps_s = 0.027
    assert [f.code for f in run(LoggingOverhead, rec)] == ["TD703"]


def test_compiling_inside_an_evaluation_is_not_what_the_evaluation_costs():
    """A compiled model's first evaluation compiles its no-grad graph there (nanochat: 8.5 s of an
    8.6 s evaluation at step 0, then 0.13 s each): the evaluation is sized without it, and a check
    before training with a final one after it (litgpt's sanity check and last validation) is no
    recurring cost."""
    from torchdoctor.model.compile_record import CompileEvent, CompileInfo

    rec = record(step_s=0.04, steps=30, warmup=0)
    rec.run.status = "completed"
    rec.phases = [PhaseStats("eval", Location("train.py", 422, "<module>"), calls=3, total_s=8.84, occurrences=[
        PhaseOccurrence(after_step=0, t=0.0, seconds=8.6), PhaseOccurrence(after_step=15, t=9.2, seconds=0.12),
        PhaseOccurrence(after_step=30, t=9.9, seconds=0.12)])]
    heavy = run(FrequentEval, rec)  # without the compile events: the first evaluation looks 8.6 s long
    assert heavy and heavy[0].severity.value == "high"
    rec.compile = CompileInfo(events=[CompileEvent(compile_id="0/0", trigger="dynamo", start=0.05, seconds=8.47,
                                                   step=0, function="forward")])
    (f,) = run(FrequentEval, rec)
    assert f.evidence["compiling_s_left_out"] == 8.47 and 0.12 <= f.evidence["seconds_each"] <= 0.13
    assert f.severity.value != "high" and "left out of these figures" in f.message
    rec.phases[0].occurrences = [PhaseOccurrence(after_step=0, t=0.0, seconds=2.8),
                                 PhaseOccurrence(after_step=30, t=9.9, seconds=0.01)]
    rec.compile.events[0].seconds = 2.6
    assert run(FrequentEval, rec) == []  # 0.2 s before training and 0.01 s after it: each once


def test_gradients_zeroed_in_place_by_hand_are_timed_at_the_line_lint_names():
    """jcjohnson's two-layer net: `w1.grad.zero_()` and `w2.grad.zero_()` after a hand-written
    update, no optimizer. Lint names the first line; the op sampler timed both; a third line of
    other ops ends the zeroing. Without lint's line there is nothing to say it is a gradient."""
    from torchdoctor.model.record import StaticFinding

    def zeroing(line, time_s):
        s = site(line, 3, time_s=time_s)
        s.op_counts = {"aten::zero_": 3}
        return s

    rec = sampled(record(step_s=0.001), sites=[site(76, 6, time_s=0.0003), zeroing(79, 0.00006),
                                               zeroing(80, 0.00003), site(81, 6, time_s=0.0003)])
    assert run(GradZeroNotNone, rec) == []
    rec.static_findings = [StaticFinding("TD303", "grad-zero-not-none", "low", "/w/train.py", 79, "zeroed in place")]
    (f,) = run(GradZeroNotNone, rec)
    assert (f.location.line, f.evidence["lines"]) == (79, [79, 80])
    assert f.evidence["zero_grad_ms_per_step"] == pytest.approx(0.03)  # 0.09 ms over 3 sampled steps
    assert f.estimated_speedup == pytest.approx(1 / (1 - 0.03), abs=1e-3) and f.severity.value == "low"
    rec.static_findings[0].reached = False  # not run: the run has nothing to time
    assert run(GradZeroNotNone, rec) == []
