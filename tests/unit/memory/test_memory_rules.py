"""Memory rules on records built by hand: the out-of-memory diagnosis ranks what to change by
bytes saved, each with its number; batch trials give TD401 and TD501 their measured gain."""

from helpers.records import optimizer, record

from torchdoctor.diagnosis.run import analyze
from torchdoctor.model.memory_record import (ACTIVATIONS, FITS, FORWARD, GRADIENTS, OPTIMIZER_STATES, OVER_LIMIT,
                                       PARAMETERS, TEMPORARIES, BatchScaling, BatchTrial, LiveAllocation,
                                       MemoryBreakdown, MemoryFit, ModuleMemory, OomEvent, ParallelMemory)
from torchdoctor.model.location import Location
from torchdoctor.rules.memory_advice import fixed_bytes

MIB = 2**20


def blocks(n=6, saved=100 * MIB, inputs=4 * MIB):
    return [ModuleMemory(f"encoder.layers.{i}", "TransformerEncoderLayer", saved, input_bytes=inputs,
                         container="encoder.layers") for i in range(n)]


def oom_record(**failure):
    rec = record(steps=0, warmup=0)
    rec.run.status = "crashed"
    rec.optimizers = [optimizer(class_name="AdamW")]
    event = OomEvent(device="cuda", message="OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB",
                     requested_bytes=512 * MIB, location=Location("train.py", 40, "Encoder.forward"), step=1,
                     batch_size=64, accounted=True, live_bytes=7000 * MIB, device_free_bytes=300 * MIB,
                     device_total_bytes=8192 * MIB, reserved_unused_bytes=600 * MIB,
                     parts={PARAMETERS: 500 * MIB, GRADIENTS: 500 * MIB, OPTIMIZER_STATES: 1000 * MIB,
                            ACTIVATIONS: 4600 * MIB, TEMPORARIES: 400 * MIB},
                     largest=[LiveAllocation(200 * MIB, ACTIVATIONS, dtype="float32")], modules=blocks())
    for key, value in failure.items():
        setattr(event, key, value)
    rec.memory = MemoryBreakdown(device="cuda:0", method="test", failure=event)
    return rec


def finding(report, code):
    return next(f for f in report.findings if f.code == code)


def test_out_of_memory_advice_is_ranked_by_bytes_saved_and_each_has_a_number():
    f = finding(analyze(oom_record()), "TD503")
    advice = f.evidence["advice"]
    saves = [a["saves_bytes"] for a in advice]
    assert saves == sorted(saves, reverse=True) and all(s > 0 for s in saves)
    changes = " | ".join(a["change"] for a in advice)
    for expected in ("checkpointing of the 6 TransformerEncoderLayer modules in encoder.layers", "bf16 autocast",
                     "fewer states than AdamW",
                     "batch at most", "accumulation steps"):
        assert expected in changes
    checkpointing = next(a for a in advice if "checkpointing" in a["change"])
    assert checkpointing["saves_bytes"] == 600 * MIB - 6 * 4 * MIB - 100 * MIB  # all blocks, less inputs and one block
    assert next(a for a in advice if "fewer states" in a["change"])["saves_bytes"] == 500 * MIB
    assert f.severity.value == "high" and f.location.line == 40 and f.estimated_speedup is None
    assert "PYTORCH_CUDA_ALLOC_CONF" not in changes  # 600 MiB of 8 GiB: below the fragmentation bar


def test_fragmentation_and_ddp_buckets_join_the_advice_when_they_are_large():
    rec = oom_record(reserved_unused_bytes=2048 * MIB)
    rec.memory.parallel = ParallelMemory("DistributedDataParallel", 2, 500 * MIB, bucket_bytes=500 * MIB,
                                         gradient_as_bucket_view=False)
    changes = [a["change"] for a in finding(analyze(rec), "TD503").evidence["advice"]]
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in changes
    assert "gradient_as_bucket_view=True for DistributedDataParallel" in changes


def test_the_batch_that_fits_comes_from_the_trials_when_there_are_some():
    rec = oom_record()
    rec.batch_scaling = BatchScaling(user_batch_size=64, capacity_bytes=8192 * MIB, verified_max_batch=40,
                                     fits=[MemoryFit(FORWARD, 2000 * MIB, 90 * MIB, 4, 0.02)],
                                     trials=[BatchTrial(b, FITS) for b in (8, 16, 32, 40)])
    advice = finding(analyze(rec), "TD503").evidence["advice"]
    batch = next(a for a in advice if a["change"].startswith("batch"))
    assert batch["change"] == "batch 40 with 2 accumulation steps (effective batch 80)"
    assert batch["saves_bytes"] == 24 * 90 * MIB


def trials_record(rates, capacity=8192 * MIB, user=16):
    rec = record(steps=10)
    rec.batch_scaling = BatchScaling(
        user_batch_size=user, capacity_bytes=capacity, capacity_source="--device-memory 8GiB",
        verified_max_batch=max(b for b, _, o in rates if o == FITS), predicted_max_batch=130,
        trials=[BatchTrial(b, o, samples=b, peak_bytes=(1000 + 50 * b) * MIB, samples_per_s=r or None,
                           step_s=b / r if r else None, relative_sem=0.01) for b, r, o in rates])
    return rec


def test_a_small_batch_that_costs_more_per_sample_is_td401_with_the_measured_gain():
    report = analyze(trials_record([(8, 500.0, FITS), (16, 800.0, FITS), (64, 2400.0, FITS), (128, 2500.0, FITS),
                                    (136, 0.0, OVER_LIMIT)]))
    small = finding(report, "TD401")
    assert small.estimated_speedup == 3.125 and small.evidence["larger_batch"] == 128
    headroom = finding(report, "TD501")
    assert "Batch 128 fits" in headroom.title and headroom.estimated_speedup is None  # the gain is TD401's


def test_no_gain_at_larger_batches_is_no_td401_but_the_room_is_still_td501():
    report = analyze(trials_record([(8, 790.0, FITS), (16, 800.0, FITS), (64, 805.0, FITS), (128, 801.0, FITS)]))
    assert not [f for f in report.findings if f.code == "TD401"]
    assert finding(report, "TD501").severity.value == "low"


def test_a_scripts_batch_near_the_capacity_is_td502():
    rec = trials_record([(8, 500.0, FITS), (16, 800.0, FITS)], capacity=1850 * MIB)
    assert "needs 97% of the usable memory" in finding(analyze(rec), "TD502").title


def test_cpu_runs_without_trials_say_what_would_measure_td401():
    report = analyze(record(steps=10))
    reason = next(n.reason for n in report.not_measured if n.code == "TD401")
    assert "torchdoctor memory" in reason


def test_dataparallel_reports_the_replica_and_the_first_gpus_extra_memory():
    rec = record(steps=10)
    rec.memory = MemoryBreakdown(device="cpu", method="test", peak_bytes=3000 * MIB,
                                 parts={PARAMETERS: 500 * MIB, GRADIENTS: 500 * MIB, OPTIMIZER_STATES: 1000 * MIB},
                                 parallel=ParallelMemory("DataParallel", 4, 500 * MIB))
    f = finding(analyze(rec), "TD604")
    assert f.evidence == {"replicas": 4, "per_replica_bytes": 500 * MIB, "first_gpu_extra_bytes": 1500 * MIB}
    assert "each of its 4 GPUs" in f.message


def test_the_batch_that_fits_leaves_room_for_what_does_not_grow_with_the_batch():
    """Parameters, gradients and states (2000 MiB) stay; activations, temporaries and the request
    (5512 MiB at batch 64) scale into the 7300 - 2000 MiB left: batch 61."""
    assert fixed_bytes(oom_record().memory.failure.parts) == 2000 * MIB
    f = finding(analyze(oom_record()), "TD503")
    changes = [a["change"] for a in f.evidence["advice"]]
    assert "batch at most 61 with 2 accumulation steps (effective batch 122)" in changes
    assert "against 5.18 GiB left beside parameters, gradients and optimizer states" in f.fix
