"""Idle-time causes on generated GPU traces with known answers (no GPU needed)."""

import pytest
from helpers.trace_builder import STEP, TraceBuilder, sync_steps

from torchdoctor.trace import analyze_trace_files, trace_findings
from torchdoctor.trace import idle



def device(summary):
    (rank,) = summary.ranks
    (dev,) = rank.devices
    return dev


def test_generated_sync_trace_yields_exactly_30_percent_sync_idle(tmp_path):
    tb = TraceBuilder(tmp_path / "t.json")
    sync_steps(tb)
    summary = analyze_trace_files([tb.close()])
    dev = device(summary)
    assert dev.total.window_us == pytest.approx(2 * STEP, abs=1e-6)
    assert dev.total.idle_by_cause_us[idle.SYNC] == pytest.approx(600.0, abs=1e-6)
    assert dev.total.share(dev.total.idle_us) == pytest.approx(0.30, abs=1e-9)
    for step in dev.steps:
        assert step.breakdown.idle_by_cause_us[idle.SYNC] == pytest.approx(300.0, abs=1e-6)
    (site,) = [s for s in dev.idle_sites if s.cause == idle.SYNC]
    assert (site.kind, site.op, site.count) == (idle.ITEM, "aten::item", 2)
    assert (site.location.path, site.location.line, site.location.function) == ("train.py", 10, "train_step")
    (f,) = [f for f in trace_findings(summary) if f.code == "TD201"]
    assert f.estimated_speedup == pytest.approx(1 / 0.7, abs=1e-3)  # Amdahl: 1000 µs step, 300 µs removed
    assert f.evidence["share_of_step_time"] == pytest.approx(0.3)
    assert f.location.function == "train_step"


@pytest.mark.parametrize("variant", ["hip", "cuda_sync_only", "no_python_ids", "gzip"])
def test_generated_sync_trace_variants_give_the_same_answer(tmp_path, variant):
    """AMD names, a CUPTI sync record without its runtime call, frames without Python ids
    (nested by time instead), and gzip all lead to the same numbers."""
    tb = TraceBuilder(tmp_path / ("t.json.gz" if variant == "gzip" else "t.json"), hip=variant == "hip",
                      gz=variant == "gzip")
    sync_steps(tb, cuda_sync=variant == "cuda_sync_only", runtime_event=variant != "cuda_sync_only",
               ids=variant != "no_python_ids")
    dev = device(analyze_trace_files([tb.close()]))
    assert dev.total.idle_by_cause_us[idle.SYNC] == pytest.approx(600.0, abs=1e-6)
    if variant != "cuda_sync_only":  # a bare CUPTI record has no host thread to find frames on
        (site,) = [s for s in dev.idle_sites if s.cause == idle.SYNC]
        assert site.location.function == "train_step"


def overlapping_launches(tb: TraceBuilder, *, kernels=150, steps=2, kernel_us=2.0, lead_us=1.0, launch_us=6.0):
    """Launch-bound loop: each launch starts `lead_us` before the previous kernel ends and
    takes `launch_us`, so every kernel waits ~5 µs for its launch to finish. A rule that
    calls it host wait only when the launch starts after the previous kernel ended files
    these gaps as kernel-to-kernel delay."""
    t = 100.0
    root = tb.frame("train.py(40): main", t - 50, 1e6)
    per_kernel = launch_us - lead_us + 0.5 + kernel_us  # from one kernel's end to the next one's
    for s in range(steps):
        step_len = 10 + kernels * per_kernel + 1
        tb.step(s + 1, t, step_len)
        tb.frame("model.py(52): _apply_prompt", t, step_len - 0.5, parent=root)
        tb.launch("first", t, 5, t + 5, 5)
        prev_end = t + 10
        for _ in range(kernels):
            rt = prev_end - lead_us
            ext = tb.op("aten::index_put_", rt - 2, launch_us + 3)
            k_start = rt + launch_us + 0.5
            tb.launch("void at::native::index_elementwise_kernel<128, 4>(long)", rt, launch_us, k_start, kernel_us,
                      ext=ext)
            prev_end = k_start + kernel_us
        t += step_len


def test_generated_overlapping_launches_are_launch_bound_not_kernel_wait(tmp_path):
    tb = TraceBuilder(tmp_path / "t.json")
    overlapping_launches(tb)
    summary = analyze_trace_files([tb.close()])
    dev = device(summary)
    causes = dev.total.idle_by_cause_us
    assert causes[idle.GPU_WAIT] == 0.0
    assert causes[idle.HOST] == pytest.approx(1.0)  # the last step's tail: no GPU work after it
    assert causes[idle.LAUNCH] == pytest.approx(dev.total.idle_us - 1.0, rel=1e-9)
    assert dev.launch["median_gap_us"] == pytest.approx(5.5)  # launch end (prev end + 5) + 0.5 µs
    assert dev.launch["median_kernel_us"] == pytest.approx(2.0)
    assert dev.launch["median_launch_call_us"] == pytest.approx(6.0)
    codes = {f.code: f for f in trace_findings(summary)}
    assert codes["TD304"].evidence["share_of_step_time"] > 0.5
    assert codes["TD301"].location.function == "_apply_prompt"
    assert codes["TD301"].evidence["op"] == "aten::index_put_"
    assert codes["TD301"].evidence["launch_waits_per_step"] == pytest.approx(150)


def test_generated_kernel_queued_early_but_started_late_is_a_gpu_side_wait(tmp_path):
    tb = TraceBuilder(tmp_path / "t.json")
    tb.step(1, 100, 400)
    tb.launch("a", 95, 5, 100, 100)
    tb.launch("b", 110, 5, 300, 100, stream=9)  # launched at 115 µs, waits for an event until 300
    tb.step(2, 500, 100)
    tb.launch("c", 490, 5, 500, 100)
    dev = device(analyze_trace_files([tb.close()]))
    assert dev.total.idle_by_cause_us[idle.GPU_WAIT] == pytest.approx(100.0)
    assert dev.total.idle_by_cause_us[idle.HOST] == pytest.approx(100.0)  # "c" launched 90 µs after "b" ended
    assert dev.total.idle_us == pytest.approx(200.0)


def test_generated_exposed_data_loading_is_the_idle_inside_dataloader_next(tmp_path):
    tb = TraceBuilder(tmp_path / "t.json")
    tb.frame("train.py(40): main", 0, 3000)
    for s, o in enumerate((100.0, 1100.0)):
        tb.step(s + 1, o, 1000)
        tb.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", o, 250)
        tb.launch("k", o + 255, 5, o + 260, 740)
    summary = analyze_trace_files([tb.close()])
    dev = device(summary)
    assert dev.total.idle_by_cause_us[idle.DATA] == pytest.approx(500.0)  # 250 µs exposed per step
    assert dev.total.idle_by_cause_us[idle.LAUNCH] == pytest.approx(20.0)  # 10 µs launching, per step
    (f,) = [f for f in trace_findings(summary) if f.code == "TD101"]
    assert f.estimated_speedup == pytest.approx(1000 / 750, abs=1e-3)
    assert f.location.function == "main"


@pytest.mark.parametrize("op,inner,runtime,code,kind", [
    ("aten::index", "aten::nonzero", "cudaStreamSynchronize", "TD202", idle.DATA_DEPENDENT),
    (None, None, "cudaDeviceSynchronize", "TD204", idle.EXPLICIT),
])
def test_generated_sync_kinds_map_to_their_rules(tmp_path, op, inner, runtime, code, kind):
    tb = TraceBuilder(tmp_path / "t.json")
    sync_steps(tb, op=op, inner=inner, runtime=runtime)
    summary = analyze_trace_files([tb.close()])
    (site,) = [s for s in device(summary).idle_sites if s.cause == idle.SYNC]
    assert site.kind == kind
    assert code in {f.code for f in trace_findings(summary)}


def test_generated_cpu_copy_and_pageable_upload_are_told_apart(tmp_path):
    tb = TraceBuilder(tmp_path / "t.json")
    for s, o in enumerate((100.0, 1100.0)):
        tb.step(s + 1, o, 1000)
        tb.op("aten::to", o, 300)
        copy = tb.op("aten::copy_", o + 10, 280)
        # 16 MiB from pageable memory: the host blocks until the copy is done, then launches
        tb.memcpy("HtoD", "Pageable", "Device", 16 << 20, o + 20, 270, o + 30, 250, ext=copy)
        tb.launch("ampere_sgemm_128x64_tn", o + 300, 5, o + 305, 400)
        # `.cpu()`: the device→host copy waits for the GEMM, the host waits for the copy
        tb.op("aten::to", o + 704, 203)
        inner = tb.op("aten::copy_", o + 705, 201)
        tb.memcpy("DtoH", "Device", "Pageable", 4096, o + 706, 200, o + 710, 5, ext=inner)
        tb.launch("k", o + 950, 5, o + 960, 40)
    summary = analyze_trace_files([tb.close()])
    dev = device(summary)
    kinds = {s.kind: s for s in dev.idle_sites if s.cause == idle.SYNC}
    assert set(kinds) == {idle.PAGEABLE_COPY, idle.D2H_COPY}
    assert kinds[idle.PAGEABLE_COPY].idle_us == pytest.approx(2 * 25)  # copy end → GEMM start
    assert kinds[idle.D2H_COPY].idle_us == pytest.approx(2 * 245)  # copy end → next kernel
    assert kinds[idle.D2H_COPY].op == "aten::to"
    up = next(t for t in dev.transfers if t.direction == "HtoD")
    assert (up.memory, up.op, up.bytes, up.count) == ("Pageable -> Device", "aten::to", 2 * (16 << 20), 2)
    assert up.gbps == pytest.approx((16 << 20) / 250e3)
    codes = {f.code for f in trace_findings(summary)}
    assert {"TD103", "TD201"} <= codes


def test_a_sync_inside_a_copy_belongs_to_the_copy(tmp_path):
    """The real shape of a blocking copy (an H200 trace): `aten::copy_` issues cudaMemcpyAsync,
    then cudaStreamSynchronize. The sync is the copy's, not a user's sync: pageable upload or
    device→host read, never "sync in aten::to" (TD201 at an upload was a false cause)."""
    tb = TraceBuilder(tmp_path / "t.json")
    for s, o in enumerate((100.0, 1100.0)):
        tb.step(s + 1, o, 1000)
        tb.launch("ampere_sgemm_128x64_tn", o - 10, 5, o, 300)
        tb.op("aten::to", o + 5, 420)
        copy = tb.op("aten::copy_", o + 10, 410)
        tb.memcpy("HtoD", "Pageable", "Device", 1 << 20, o + 20, 20, o + 300, 80, ext=copy)
        tb.sync(o + 45, 340, ext=copy)  # returns when the upload is done, at o + 385
        tb.launch("k", o + 500, 5, o + 510, 40)
        tb.op("aten::to", o + 600, 210)
        back = tb.op("aten::copy_", o + 601, 205)
        tb.memcpy("DtoH", "Device", "Pinned", 4096, o + 602, 5, o + 610, 3, ext=back)
        tb.sync(o + 608, 200, ext=back)
        tb.launch("k", o + 900, 5, o + 910, 40)
    dev = device(analyze_trace_files([tb.close()]))
    kinds = {s.kind for s in dev.idle_sites if s.cause == idle.SYNC}
    assert kinds == {idle.PAGEABLE_COPY, idle.D2H_COPY}


def test_generated_sub_microsecond_kernels_keep_their_length(tmp_path):
    tb = TraceBuilder(tmp_path / "t.json")
    tb.step(1, 100, 10)
    for i in range(10):
        tb.launch("tiny", 99, 0.2, 100 + i, 0.6)  # 0.6 µs kernels, 0.4 µs apart
    dev = device(analyze_trace_files([tb.close()]))
    assert dev.busy_us == pytest.approx(6.0, abs=1e-9)
    assert dev.total.compute_us == pytest.approx(6.0, abs=1e-9)
    assert dev.steps[0].median_kernel_us == pytest.approx(0.6, abs=1e-9)
