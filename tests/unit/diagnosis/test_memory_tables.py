"""The memory tables say what their numbers add up over."""

from helpers.records import record

from torchdoctor.diagnosis.memory import memory_tables
from torchdoctor.model.memory_record import MemoryBreakdown, ModuleMemory


def _with_memory(micro_batches: int):
    rec = record(steps=4, warmup=2, micro_batches=micro_batches)
    rec.memory = MemoryBreakdown(device="cpu", method="storage accounting", peak_step=2, peak_bytes=30 * 2**20,
                                 parts={"activations": 20 * 2**20, "parameters": 10 * 2**20}, batch_size=64,
                                 modules=[ModuleMemory("", "Net", 40 * 2**20), ModuleMemory("enc", "Encoder", 40 * 2**20)])
    return rec


def _module_caption(rec) -> str:
    return next(t for t in memory_tables(rec) if t.title == "Modules holding the most activations").caption


def test_module_totals_over_several_micro_batches_say_so():
    caption = _module_caption(_with_memory(micro_batches=2))
    assert "summed over its 2 micro-batches" in caption and "1/2 of this is live at once" in caption


def test_one_backward_per_step_needs_no_such_word():
    assert "micro-batches" not in _module_caption(_with_memory(micro_batches=1))
