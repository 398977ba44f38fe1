"""Hand-built Kineto traces with exact times (µs, fractions allowed), written by the
benchmark generator's KinetoWriter so tests and benchmarks share one rendering of the format."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_GEN = Path(__file__).resolve().parents[2] / "benchmarks" / "trace_gen.py"
_spec = importlib.util.spec_from_file_location("trace_gen", _GEN)
trace_gen = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("trace_gen", trace_gen)
_spec.loader.exec_module(trace_gen)

A100 = trace_gen.A100
PASCAL = {**A100, "name": "Tesla P100-PCIE-16GB", "computeMajor": 6, "computeMinor": 0}
PID, TID = 100, 100


def ns(us: float) -> int:
    return round(us * 1000)


class TraceBuilder:
    """Events at explicit times. `launch` writes the runtime call, the GPU event and the
    ac2g flow pair, like Kineto; ids are allocated unless given."""

    def __init__(self, path: Path, *, device_properties: list[dict] | None = None, distributed: dict | None = None,
                 gz: bool = False, hip: bool = False, flows: bool = True):
        props = [A100] if device_properties is None else device_properties
        self.w = trace_gen.KinetoWriter(path, device_properties=props, distributed=distributed, gz=gz)
        self.path = Path(path)
        self.hip, self.flows = hip, flows
        self._id = 1000
        self.end = 0.0

    def _next(self) -> int:
        self._id += 1
        return self._id

    def _rt(self, name: str) -> str:
        return trace_gen.HIP_NAMES.get(name, name) if self.hip else name

    def annotation(self, name: str, ts: float, dur: float, tid: int = TID) -> None:
        self.w.complete("user_annotation", name, PID, tid, ns(ts), ns(dur), {"External id": self._next()})

    def step(self, n: int, ts: float, dur: float) -> None:
        self.annotation(f"ProfilerStep#{n}", ts, dur)

    def op(self, name: str, ts: float, dur: float, tid: int = TID, **args) -> int:
        ext = self._next()
        self.w.complete("cpu_op", name, PID, tid, ns(ts), ns(dur), {"External id": ext, **args})
        return ext

    def frame(self, name: str, ts: float, dur: float, parent: int | None = None, tid: int = TID,
              ids: bool = True) -> int:
        """A Python frame; `ids=False` leaves out Python id / parent id, as older traces do."""
        py_id = self._next()
        args = {"Python parent id": parent, "Python id": py_id} if ids else {"Ev Idx": py_id}
        self.w.complete("python_function", name, PID, tid, ns(ts), ns(dur), args)
        return py_id

    def launch(self, kernel: str, rt_ts: float, rt_dur: float, k_ts: float, k_dur: float, *, ext: int = -1,
               stream: int = 7, device: int = 0, runtime: str = "cudaLaunchKernel", cat: str = "kernel",
               tid: int = TID, **gpu_args) -> int:
        corr = self._next()
        rt_args = {"cbid": 211, "correlation": corr}
        if ext >= 0:
            rt_args = {"External id": ext, **rt_args}
            gpu_args = {"External id": ext, **gpu_args}
        self.w.complete("cuda_runtime", self._rt(runtime), PID, tid, ns(rt_ts), ns(rt_dur), rt_args)
        self.w.complete(cat, kernel, device, stream, ns(k_ts), ns(k_dur),
                        {**gpu_args, "device": device, "stream": stream, "correlation": corr})
        if self.flows:
            self.w.flow("s", corr, PID, tid, ns(rt_ts))
            self.w.flow("f", corr, device, stream, ns(k_ts))
        self.end = max(self.end, k_ts + k_dur, rt_ts + rt_dur)
        return corr

    def memcpy(self, kind: str, src: str, dst: str, nbytes: int, rt_ts: float, rt_dur: float, k_ts: float,
               k_dur: float, *, ext: int = -1, runtime: str = "cudaMemcpyAsync", **kw) -> int:
        return self.launch(f"Memcpy {kind} ({src} -> {dst})", rt_ts, rt_dur, k_ts, k_dur, ext=ext, runtime=runtime,
                           cat="gpu_memcpy", bytes=nbytes, **{"memory bandwidth (GB/s)": nbytes / (k_dur * 1e3)}, **kw)

    def sync(self, ts: float, dur: float, *, ext: int = -1, runtime: str = "cudaStreamSynchronize",
             cuda_sync: bool = False, runtime_event: bool = True, stream: int = 7) -> int:
        corr = self._next()
        if runtime_event:
            args = {"cbid": 131, "correlation": corr}
            if ext >= 0:
                args = {"External id": ext, **args}
            self.w.complete("cuda_runtime", self._rt(runtime), PID, TID, ns(ts), ns(dur), args)
        if cuda_sync:
            kind = "Stream Sync" if "Stream" in runtime else "Context Sync"  # CUPTI sync type names in Kineto
            self.w.complete("cuda_sync", kind, 0, stream, ns(ts), ns(dur),
                            {"cuda_sync_kind": kind, "stream": stream, "correlation": corr, "device": 0})
        return corr

    def close(self) -> Path:
        self.w.close(ns(self.end + 10))
        return self.path


STEP = 1000.0  # µs: the step length of the known-answer traces below


def sync_steps(tb: TraceBuilder, *, steps=2, origin=100.0, runtime="cudaStreamSynchronize", op="aten::item",
               inner="aten::_local_scalar_dense", cuda_sync=False, runtime_event=True, frames=True, ids=True):
    """Per 1000 µs step: a 500 µs kernel, a host sync (inside `op`) that returns right after it,
    then a 200 µs kernel launched 300 µs later: 300 µs (30 %) of GPU idle caused by the sync."""
    root = tb.frame("train.py(40): main", origin - 50, steps * STEP + 100, ids=ids) if frames else None
    for s in range(steps):
        o = origin + s * STEP
        tb.step(s + 1, o, STEP)
        step_frame = tb.frame("train.py(10): train_step", o + 1, STEP - 2, parent=root, ids=ids) if frames else None
        if frames:
            tb.frame("torch/_tensor.py(1020): item", o + 19, 490, parent=step_frame, ids=ids)
        tb.launch("ampere_sgemm_128x64_tn", o - 10, 5, o, 500)
        ext = None
        if op:
            tb.op(op, o + 20, 488)
            ext = tb.op(inner, o + 25, 482) if inner else None
        tb.sync(o + 30, 475, ext=ext if ext is not None else -1, runtime=runtime, cuda_sync=cuda_sync,
                runtime_event=runtime_event)
        tb.launch("void at::native::vectorized_elementwise_kernel<4>(int)", o + 795, 5, o + 800, 200)
