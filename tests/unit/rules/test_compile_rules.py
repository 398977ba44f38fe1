"""torch.compile rules on hand-built records: TD405 recompiles (the guard in plain words, the
recompile limit), TD406 graph breaks, TD404 silent on a compiled script, compiling in the
wall-time table."""

import pytest
from helpers.records import loader, record, sampled, site

from torchdoctor.diagnosis.wall_time import wall_time_table
from torchdoctor.model.compile_record import BACKWARD, DYNAMO, CompileEvent, CompileInfo, GraphBreak
from torchdoctor.model.findings import Severity
from torchdoctor.model.location import Location
from torchdoctor.rules.graph_breaks import GraphBreak as GraphBreakRule
from torchdoctor.rules.compile import Recompilation, read_guard
from torchdoctor.rules.compute import CompileCandidate
from torchdoctor.rules.facts import RunFacts

CALL = Location("train.py", 40, "<module>")


def _event(cid, step, seconds=0.5, reason="", limit=False, trigger=DYNAMO, start=None):
    return CompileEvent(compile_id=cid, trigger=trigger, start=start if start is not None else step * 0.1,
                        seconds=seconds, step=step, function="forward", module="Net", called_from=CALL,
                        call_text="logits = model(ids)", recompile_reason=reason, limit_hit=limit,
                        failed="Dynamo recompile limit exceeded" if limit else "")


def _size(a, b, cid):
    return f"{cid}: tensor 'ids' size mismatch at index 1. expected {a}, actual {b}"


def test_guards_in_plain_words():
    size = read_guard("0/2: tensor 'args[0]' size mismatch at index 1. expected 37, actual 52")
    assert (size.kind, size.subject, size.seen, size.dim) == ("size", "dimension 1 of the first argument",
                                                             ["37", "52"], 1)
    value = read_guard("1/0: L['scale'] == 0.5")
    assert value.kind == "value" and value.subject == "the Python value `scale`" and value.seen == ["0.5"]
    stacked = read_guard("2/0: ___stack0 == 3.39    # return (pred / (scale + 1e-6))  # ex/loss.py:18 in f")
    assert stacked.kind == "value" and stacked.value_line == Location("ex/loss.py", 18)
    attribute = read_guard("0/1: L['self'].training == True")
    assert attribute.kind == "attribute" and "self.training" in attribute.subject
    assert read_guard("0/1: tensor 'x' dtype mismatch. expected Float, actual Half").kind == "tensor"
    assert read_guard("0/1: something new").kind == "other"


def test_the_recompile_limit_is_high_at_the_calling_line_with_the_real_remedy():
    rec = record(steps=10, warmup=2)
    rec.steps = [s for s in rec.steps]
    for s in rec.steps:
        s.batch_shape = [16, 30 + s.index]
    rec.loaders = [loader(iterated_at=Location("train.py", 38, "<module>"), batches=12)]
    events = [_event("0/0", 1)] + [_event(f"0/{i}", i + 1, reason=_size(30 + i, 31 + i, f"0/{i - 1}"))
                                   for i in range(1, 8)]
    events.append(_event("0/8", 9, seconds=0.0, reason=_size(37, 38, "0/7"), limit=True))
    events += [_event(f"0/{i}", i + 1, seconds=0.4, trigger=BACKWARD) for i in range(0, 8)]
    rec.compile = CompileInfo(events=events, recompile_limit=8)
    (finding,) = Recompilation().check(rec, RunFacts.of(rec))
    assert finding.severity == Severity.HIGH and finding.location == CALL
    assert "recompile limit (8) in step 9" in finding.message
    assert "dimension 1 of `ids` changed (values seen: 31, 32" in finding.message
    assert "they come from train.py:38" in finding.message  # the training batches changed in that dimension
    assert "mark_dynamic(ids, 1)" in finding.fix and "dynamic=True" in finding.fix
    assert finding.evidence["recompile_s"] == round(7 * 0.5 + 7 * 0.4, 3)  # the failed 8th took none; backward graphs of the recompiles too


def test_recompiles_inside_the_measured_steps_are_sized_from_their_time():
    rec = record(step_s=0.1, steps=10, warmup=2)
    events = [_event("0/0", 1, seconds=0.05), _event("0/1", 4, seconds=0.2, reason="0/0: L['lr'] == 0.1"),
              _event("0/2", 6, seconds=0.2, reason="0/1: L['lr'] == 0.09")]
    rec.compile = CompileInfo(events=events)
    (finding,) = Recompilation().check(rec, RunFacts.of(rec))
    assert finding.estimated_speedup is not None and finding.estimated_speedup > 1.25
    assert finding.severity == Severity.HIGH and "the Python value `lr` changed" in finding.message
    assert "as a tensor" in finding.fix


def test_one_recompile_before_measuring_is_dynamos_normal_automatic_dynamic():
    rec = record(steps=10, warmup=2)
    rec.compile = CompileInfo(events=[_event("0/0", 1), _event("0/1", 2, reason=_size(3, 4, "0/0"))])
    assert Recompilation().check(rec, RunFacts.of(rec)) == []


def test_a_graph_break_at_a_host_read_names_the_users_line():
    rec = record(steps=4, warmup=1)
    where = Location("loss.py", 17, "normalized_mse")
    rec.compile = CompileInfo(events=[_event("0/0", 1)], breaks=[GraphBreak(
        location=where, reason="Unsupported Tensor.item() call with capture_scalar_outputs=False",
        detail="Dynamo does not support tracing `Tensor.item()`.", host_sync=True)],
        graph_calls={str(i): 2 for i in range(1, 6)}, compiled_calls={str(i): 1 for i in range(1, 6)})
    (finding,) = GraphBreakRule().check(rec, RunFacts.of(rec))
    assert finding.location == where and finding.severity == Severity.MEDIUM
    assert "a training step ran 2 compiled graphs in 1 compiled calls" in finding.message
    assert "not measurable on CPU" in finding.estimate_basis and ".item()" in finding.fix


def test_a_graph_break_inside_a_library_points_at_the_users_call_and_stays_low():
    rec = record(steps=4, warmup=1)
    brk = GraphBreak(location=Location("transformers/models/x.py", 90, ""), reason="print",
                     library="transformers", called_from=Location("train.py", 12, "<module>"))
    rec.compile = CompileInfo(events=[_event("0/0", 1)], breaks=[brk], graph_calls={"2": 3, "3": 3, "4": 3, "5": 3})
    (finding,) = GraphBreakRule().check(rec, RunFacts.of(rec))
    assert finding.location == Location("train.py", 12, "<module>") and finding.severity == Severity.LOW
    assert "inside transformers" in finding.message


def test_td404_is_silent_when_the_script_compiles():
    rec = sampled(record(steps=10), sites=[site(10, 3000)], windows=3)
    rec.dispatch.total_ops = 3000
    assert CompileCandidate().check(rec, RunFacts.of(rec))  # a candidate, uncompiled
    rec.compile = CompileInfo(compiled_at=[Location("train.py", 8, "<module>")], events=[_event("0/0", 1)])
    assert CompileCandidate().check(rec, RunFacts.of(rec)) == []


def test_td404_is_silent_when_large_ops_set_the_pace():
    """1,000 small ops in a 10 ms step (10 µs each): overhead sets the pace; the same ops in a 12 s
    step (llm.c's GPT-2 on a CPU: ~4 ms per op) spend it in a few large matmuls."""
    rec = sampled(record(steps=10, step_s=0.01), sites=[site(10, 3000)], windows=3)
    rec.dispatch.total_ops = 3000
    (finding,) = CompileCandidate().check(rec, RunFacts.of(rec))
    assert finding.evidence["step_us_per_op"] == pytest.approx(10.0)  # 3,000 ops over 3 sampled steps
    slow = sampled(record(steps=10, step_s=12.0), sites=[site(10, 3000)], windows=3)
    slow.dispatch.total_ops = 3000
    assert CompileCandidate().check(slow, RunFacts.of(slow)) == []


def test_compiling_is_a_row_of_the_wall_time_table():
    rec = record(step_s=0.1, steps=10, warmup=2)
    rec.run.wall_s, rec.run.startup_s = 3.0, 0.5
    rec.compile = CompileInfo(events=[_event("0/0", 1, seconds=0.9, start=0.6), _event("0/0", 1, seconds=0.3,
                                                                                     trigger=BACKWARD, start=1.5)])
    table = wall_time_table(rec)
    (row,) = [r for r in table.rows if "compiling" in r[0]]
    assert row[1] == 1.2 and row[2] == "40%"
    assert "Net.forward" not in row[3] and "forward called at train.py:40" in row[3] and "2 compiles" in row[3]


def test_a_grad_mode_recompile_in_an_evaluation_is_placed_there_and_paid_once():
    """An evaluation under `torch.no_grad()` recompiles the model once (grad mode): the finding
    points at the evaluation's call, not the training call, and is not ranked as a per-step cost."""
    rec = record(step_s=0.1, steps=10, warmup=2)
    evaluation = Location("train.py", 80, "evaluate")
    recompile = _event("0/1", 6, seconds=3.0, reason="0/0: GLOBAL_STATE changed: grad_mode ")
    recompile.called_from, recompile.call_text = evaluation, "logits = model(x_val)"
    rec.compile = CompileInfo(events=[_event("0/0", 1), recompile])
    (finding,) = Recompilation().check(rec, RunFacts.of(rec))
    assert finding.location == evaluation and "`logits = model(x_val)`" in finding.message
    assert finding.severity == Severity.LOW and finding.estimated_speedup is None
    assert "compiles once a run" in finding.estimate_basis


def test_variants_compiled_in_one_step_and_reused_after_are_no_recompilation_finding():
    """nanochat's compiled optimizer kernel is called once per parameter shape: four variants, all
    in the first step, reused by every later step. A cost paid once (the wall-time table's), not a
    recompilation habit; the same variants arriving one per step are."""
    rec = record(steps=10, warmup=2)
    ranks = [_event("1/0", 1)] + [_event(f"1/{i}", 1, reason=f"1/{i - 1}: tensor 'p' rank mismatch. expected 2, actual 1")
                                  for i in range(1, 4)]
    rec.compile = CompileInfo(events=ranks)
    assert Recompilation().check(rec, RunFacts.of(rec)) == []
    for i, event in enumerate(ranks):
        event.step = i + 1  # one new variant a step: the function keeps recompiling as the run goes
    assert len(Recompilation().check(rec, RunFacts.of(rec))) == 1


def test_graph_breaks_are_one_finding_per_cause_at_the_line_to_change():
    """open_lm compiles an FSDP1 model built without use_orig_params=True: Dynamo breaks at two
    places for it and runs ten calling functions uncompiled (16 findings before); breaks inside
    xformers are reached from one user line. Two `.item()` reads at two lines stay two fixes."""
    from torchdoctor.model.distributed_record import DistributedInfo, FsdpUnit, RankIdentity

    rec = record(steps=4, warmup=1)
    fsdp_detail = "Dynamo only supports FSDP with use_orig_params=True"
    skipped = "Failed to handle graph break gracefully. Skipping the function and falling back to eager."
    model_call = Location("open_lm/train.py", 131, "train_one_epoch")
    swiglu = Location("open_lm/model.py", 323, "forward")
    breaks = [GraphBreak(Location("torch/_dynamo/external_utils.py", 69, ""), "FSDP with use_orig_params=False",
                         fsdp_detail, library="torch", called_from=model_call),
              GraphBreak(Location("open_lm/rotary.py", 90, "forward"), "FSDP with use_orig_params=False", fsdp_detail)]
    breaks += [GraphBreak(Location("open_lm/model.py", line, "forward"), skipped, fsdp_detail) for line in (160, 312, 393)]
    breaks += [GraphBreak(Location("xformers/ops/unbind.py", 30, ""), "torch.* op returned non-Tensor", "non-Tensor",
                          library="xformers", called_from=swiglu, count=5),
               GraphBreak(Location("xformers/ops/common.py", 64, ""), "Unsupported method call", "data_ptr",
                          library="xformers", called_from=swiglu),
               GraphBreak(Location("xformers/ops/unbind.py", 95, ""), skipped, "no exception handler",
                          library="xformers", called_from=swiglu)]
    breaks += [GraphBreak(Location("loss.py", line, "f"), "Tensor.item()", "", host_sync=True) for line in (17, 30)]
    rec.compile = CompileInfo(events=[_event("0/0", 1)], breaks=breaks)
    wrapped = Location("open_lm/main.py", 551, "main")
    rec.distributed = DistributedInfo(RankIdentity(0, 2), fsdp=[FsdpUnit(module="layers.0", kind="Block", version=1, created_at=wrapped)])
    found = {str(f.location): f for f in GraphBreakRule().check(rec, RunFacts.of(rec))}
    assert set(found) == {str(wrapped), str(swiglu), "loss.py:17", "loss.py:30"}
    fsdp = found[str(wrapped)]
    assert "use_orig_params=True" in fsdp.fix and fsdp.severity == Severity.MEDIUM
    assert len(fsdp.evidence["places"]) == 1 and len(fsdp.evidence["functions_run_uncompiled"]) == 3
    assert "ran 3 calling functions uncompiled" in fsdp.message
    library = found[str(swiglu)]
    assert library.evidence["places"] == ["xformers/ops/common.py:64"]
    assert library.evidence["functions_run_uncompiled"] == ["xformers/ops/unbind.py:95"]
    assert "inside xformers 2 times on the way from that call" in library.message
    # the call wrote `use_orig_params=` (a flag, False in this run) six lines below its first: the fix goes there
    keyword = Location("open_lm/main.py", 557, "main")
    rec.distributed.fsdp[0].use_orig_params, rec.distributed.fsdp[0].use_orig_params_at = False, keyword
    (fsdp,) = [f for f in GraphBreakRule().check(rec, RunFacts.of(rec)) if f.fix == fsdp.fix]
    assert fsdp.location == keyword and "open_lm/main.py:557" in fsdp.message
