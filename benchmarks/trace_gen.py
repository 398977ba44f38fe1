"""Generate realistic Kineto (torch.profiler) Chrome traces of any size, for benchmarks and tests.

The text layout follows libkineto's `ChromeTraceLogger` (output_json.cpp): the header keys
(`schemaVersion`, `deviceProperties`, `distributedInfo`, `baseTimeNanoseconds`), one event per
block with `"ts": <µs>.<ns:03>`, `args` carrying `External id`, `correlation`, `stream`,
`bytes`, `memory bandwidth (GB/s)`, kernel launch geometry, `Input Dims`/`Input type` for ops,
`Python id`/`Python parent id` for python_function frames, `ac2g` flow pairs, and the closing
`Record Window End` instant and `traceName`.

The content comes from a small simulator: a host clock runs Python frames, aten ops and
runtime calls; each launch enqueues a kernel on a stream that starts when both the launch
and the stream's previous work are done; syncs block the host until the GPU drains;
pageable copies block the host; NCCL all-reduces take longer on the ranks that arrive early.
Every time is an integer number of nanoseconds, written exactly as Kineto does.

    python benchmarks/trace_gen.py OUT.json --events 1000000 [--ranks 2] [--gz]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

BASE_TS_NS = 4_529_152_877_737_807  # µs-scale offsets as in real traces (~4.5e12 µs)

A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_031_714_816,
        "computeMajor": 8, "computeMinor": 0, "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
        "sharedMemPerBlock": 49152, "numSms": 108, "regsPerMultiprocessor": 65536,
        "sharedMemPerBlockOptin": 166912, "sharedMemPerMultiprocessor": 167936}

ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::{op}<float>, "
               "at::detail::Array<char*, 3> >(int, at::native::{op}<float>, at::detail::Array<char*, 3>)")
GEMM_FP32 = "ampere_sgemm_128x64_tn"
GEMM_BF16 = "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel"
INDEX_PUT = "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_put_kernel_impl<at::native::OpaqueType<4> >(at::TensorIterator&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::index_put_kernel_impl<at::native::OpaqueType<4> >(at::TensorIterator&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1} const&)::{lambda(int)#1}>(long, at::native::gpu_index_kernel<at::native::index_put_kernel_impl<at::native::OpaqueType<4> >(at::TensorIterator&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::index_put_kernel_impl<at::native::OpaqueType<4> >(at::TensorIterator&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1} const&)::{lambda(int)#1})"
ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
        "namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor"
        "<float, 4, (at::native::ADAM_MODE)0, false>, float*, double, double, double, double, double, "
        "bool, bool*, bool*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::"
        "(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)0, false>, "
        "float*, double, double, double, double, double, bool, bool*, bool*)")
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

HIP_NAMES = {"cudaLaunchKernel": "hipLaunchKernel", "cudaMemcpyAsync": "hipMemcpyAsync",
             "cudaStreamSynchronize": "hipStreamSynchronize", "cudaDeviceSynchronize": "hipDeviceSynchronize",
             "cudaMemsetAsync": "hipMemsetAsync"}
CBID = {"cudaLaunchKernel": 211, "cudaMemcpyAsync": 41, "cudaStreamSynchronize": 131,
        "cudaDeviceSynchronize": 165, "cudaMemsetAsync": 51}


def us(ns: int) -> str:
    """Kineto's exact rendering of a nanosecond time in µs: integer part, 3 decimals."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _value(v: Any) -> str:
    return json.dumps(v, separators=(", ", ": "))


# The order Kineto writes sections in (as seen in torch.profiler exports): metadata, then the
# host ops and annotations by start time, then runtime calls and GPU activity, then the
# Python frames by start time, then the trace span.
_SECTION = {"M": 0, "cpu_op": 1, "user_annotation": 1, "fwdbwd": 1, "cuda_runtime": 2, "kernel": 2,
            "gpu_memcpy": 2, "gpu_memset": 2, "cuda_sync": 2, "ac2g": 2, "python_function": 3, "Trace": 4}


class KinetoWriter:
    """Writes events in libkineto's layout and order (events are sorted at close)."""

    def __init__(self, path: Path, *, device_properties: list[dict] | None = None,
                 distributed: dict | None = None, gz: bool = False, int_times: bool = False):
        self.path = Path(path)
        self.fh = gzip.open(self.path, "wt", encoding="utf-8", compresslevel=1) if gz \
            else open(self.path, "w", encoding="utf-8")
        self.int_times = int_times  # some producers write whole µs: `"ts": 1234`
        self.count = 0
        self._events: list[tuple[int, int, str]] = []
        props = ",".join("\n    " + _value(p) for p in (device_properties or []))
        self.fh.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [' + props + "\n  ],")
        if distributed is not None:
            self.fh.write('\n  "distributedInfo": ' + _value(distributed) + ",")
        self.fh.write('\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": 1700000000000000000,'
                      '\n  "traceEvents": [')

    def _t(self, ns: int) -> str:
        return str(ns // 1000) if self.int_times else us(ns)

    def _emit(self, text: str, section: str = "M", ts_ns: int = 0) -> None:
        self._events.append((_SECTION.get(section, 4), ts_ns, text))
        self.count += 1

    def complete(self, cat: str, name: str, pid: int | str, tid: int | str, ts_ns: int, dur_ns: int,
                 args: dict | None = None) -> None:
        body = (f'\n  {{\n    "ph": "X", "cat": "{cat}", "name": {_value(name)}, "pid": {_value(pid)}, '
                f'"tid": {_value(tid)},\n    "ts": {self._t(ts_ns)}, "dur": {self._t(dur_ns)}')
        if args:
            inner = ",\n      ".join(f"{_value(k)}: {_value(v)}" for k, v in args.items())
            body += f',\n    "args": {{\n      {inner}\n    }}'
        self._emit(body + "\n  }", cat, ts_ns)

    def flow(self, phase: str, flow_id: int, pid: int, tid: int, ts_ns: int, cat: str = "ac2g") -> None:
        bp = ', "bp": "e"' if phase == "f" else ""
        self._emit(f'\n  {{\n    "ph": "{phase}", "id": {flow_id}, "pid": {pid}, "tid": {tid}, '
                   f'"ts": {self._t(ts_ns)},\n    "cat": "{cat}", "name": "{cat}"{bp}\n  }}', cat, ts_ns)

    def metadata(self, name: str, pid: int | str, tid: int | str, args: dict) -> None:
        self._emit(f'\n  {{\n    "name": "{name}", "ph": "M", "ts": {self._t(BASE_TS_NS)}, "pid": '
                   f'{_value(pid)}, "tid": {_value(tid)},\n    "args": {_value(args)}\n  }}')

    def close(self, end_ns: int) -> None:
        self._emit(f'\n  {{\n    "name": "Record Window End", "ph": "i", "s": "g",\n    "pid": "", '
                   f'"tid": "", "ts": {self._t(end_ns)}\n  }}', "Trace", end_ns)
        self._events.sort(key=lambda e: (e[0], e[1]))
        texts = [e[2] for e in self._events]
        self._events = []
        for i in range(0, len(texts), 10_000):
            self.fh.write(("," if i else "") + ",".join(texts[i:i + 10_000]))
        self.fh.write(f'\n  ],\n  "traceName": {_value(str(self.path))}\n}}\n')
        self.fh.close()


@dataclass
class Plan:
    """What the simulated training step does. Times in ns."""

    layers: int = 8
    fp32_matmul: bool = True  # False: bf16 autocast kernels
    gemm_ns: int = 60_000
    elementwise_ns: int = 6_000
    host_op_ns: int = 9_000  # Python + dispatch per aten op, before its launch
    launch_ns: int = 5_000  # cudaLaunchKernel on the host
    latency_ns: int = 3_000  # launch start → earliest kernel start
    kernel_gap_ns: int = 1_000  # a queued kernel starts this long after the previous one ends
    dataloader_ns: int = 200_000
    item_per_step: bool = False  # `loss.item()` each step: a stream sync
    explicit_sync: bool = False  # `torch.cuda.synchronize()` each step
    pageable_bytes: int = 0  # host→device batch copy from pageable memory
    pinned_bytes: int = 0
    loop_ops: int = 0  # a Python loop issuing this many tiny index_put_ kernels per step
    loop_kernel_ns: int = 2_000
    allreduce_bytes: int = 0  # gradient all-reduce per step (needs ranks > 1)
    link_gbps: float = 20.0
    with_stack: bool = True
    with_flows: bool = True
    with_cuda_sync: bool = True
    hip: bool = False
    int_times: bool = False


@dataclass
class _Frame:
    name: str
    start: int
    py_id: int
    parent: int | None


@dataclass
class Simulator:
    w: KinetoWriter
    plan: Plan
    rank: int = 0
    pid: int = 4242
    tid: int = 4242
    device: int = 0
    t: int = BASE_TS_NS + 150_000
    gpu_free: dict[int, int] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    _ext: int = 0
    _corr: int = 0
    _py: int = 0
    frames: list[_Frame] = field(default_factory=list)
    op_ext: list[int] = field(default_factory=list)
    collective_index: int = 0
    late_rank: int | None = None

    def jitter(self, ns: int, spread: float = 0.1) -> int:
        return max(1, int(ns * (1.0 + self.rng.uniform(-spread, spread))))

    def rt(self, name: str) -> str:
        return HIP_NAMES.get(name, name) if self.plan.hip else name

    @contextmanager
    def frame(self, name: str) -> Iterator[None]:
        if not self.plan.with_stack:
            yield
            return
        self._py += 1
        f = _Frame(name, self.t, self._py, self.frames[-1].py_id if self.frames else None)
        self.frames.append(f)
        self.t += 300
        yield
        self.t += 300
        self.frames.pop()
        self.w.complete("python_function", name, self.pid, self.tid, f.start, self.t - f.start,
                        {"Python parent id": f.parent, "Python id": f.py_id, "Ev Idx": f.py_id})

    @contextmanager
    def op(self, name: str, types: list[str] | None = None, dims: list | None = None) -> Iterator[int]:
        self._ext += 1
        ext, start = self._ext, self.t
        self.op_ext.append(ext)
        self.t += self.jitter(self.plan.host_op_ns // 2)
        yield ext
        self.t += self.jitter(self.plan.host_op_ns // 2)
        self.op_ext.pop()
        args: dict[str, Any] = {"External id": ext, "Record function id": 0}
        if types is not None:
            args.update({"Input type": types, "Input Dims": dims or [[] for _ in types],
                         "Input Strides": [[] for _ in types], "Concrete Inputs": ["" for _ in types]})
        args["Ev Idx"] = ext
        self.w.complete("cpu_op", name, self.pid, self.tid, start, self.t - start, args)

    @contextmanager
    def annotation(self, name: str) -> Iterator[None]:
        self._ext += 1
        ext, start = self._ext, self.t
        yield
        self.w.complete("user_annotation", name, self.pid, self.tid, start, self.t - start,
                        {"External id": ext, "Record function id": 0, "Ev Idx": ext})

    def _gpu(self, cat: str, name: str, dur: int, stream: int, runtime: str, args: dict, host_blocks: bool = False,
             earliest: int | None = None) -> tuple[int, int]:
        self._corr += 1
        corr, ext = self._corr, self.op_ext[-1] if self.op_ext else 0
        launch = self.jitter(self.plan.launch_ns, 0.05)
        free = self.gpu_free.get(stream)
        start = max(self.t + self.plan.latency_ns, free + self.plan.kernel_gap_ns if free else 0, earliest or 0)
        self.gpu_free[stream] = start + dur
        rt_dur = max(launch, start + dur - self.t + 1_000) if host_blocks else launch
        self.w.complete("cuda_runtime", self.rt(runtime), self.pid, self.tid, self.t, rt_dur,
                        {"External id": ext, "cbid": CBID.get(runtime, 0), "correlation": corr})
        gpu_args = {"External id": ext, **args, "device": self.device, "context": 1, "stream": stream,
                    "correlation": corr}
        self.w.complete(cat, name, self.device, stream, start, dur, gpu_args)
        if self.plan.with_flows:
            self.w.flow("s", corr, self.pid, self.tid, self.t)
            self.w.flow("f", corr, self.device, stream, start)
        self.t += rt_dur
        return start, corr

    def kernel(self, name: str, dur: int, stream: int = 7) -> int:
        start, _ = self._gpu("kernel", name, self.jitter(dur, 0.05), stream, "cudaLaunchKernel",
                             {"queued": 0, "registers per thread": 32, "shared memory": 0,
                              "blocks per SM": 0.5, "warps per SM": 2.0, "grid": [54, 1, 1],
                              "block": [128, 1, 1], "est. achieved occupancy %": 3})
        return start

    def memcpy(self, kind: str, src: str, dst: str, nbytes: int, gbps: float, stream: int = 7) -> None:
        dur = max(1_000, int(nbytes / gbps))  # bytes / (GB/s) = ns
        blocking = src == "Pageable" or kind == "DtoH"
        self._gpu("gpu_memcpy", f"Memcpy {kind} ({src} -> {dst})", dur, stream, "cudaMemcpyAsync",
                  {"bytes": nbytes, "memory bandwidth (GB/s)": round(nbytes / dur, 3)}, host_blocks=blocking)

    def sync(self, runtime: str = "cudaStreamSynchronize", stream: int = 7) -> None:
        self._corr += 1
        corr, ext = self._corr, self.op_ext[-1] if self.op_ext else 0
        start = self.t
        done = max([start] + list(self.gpu_free.values()))
        end = max(start + 2_000, done + 1_500)
        self.w.complete("cuda_runtime", self.rt(runtime), self.pid, self.tid, start, end - start,
                        {"External id": ext, "cbid": CBID[runtime], "correlation": corr})
        if self.plan.with_cuda_sync:
            kind = "Stream Sync" if "Stream" in runtime else "Context Sync"  # CUPTI sync type names in Kineto
            self.w.complete("cuda_sync", kind, self.device, stream if "Stream" in runtime else -1, start,
                            end - start, {"cuda_sync_kind": kind, "stream": stream if "Stream" in runtime else -1,
                                          "correlation": corr, "device": self.device, "context": 1})
        self.t = end

    # --- one training step ------------------------------------------------------------------

    def step(self, n: int, world: int) -> None:
        p = self.plan
        with self.annotation(f"ProfilerStep#{n}"):
            with self.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"):
                with self.frame("torch/utils/data/dataloader.py(733): __next__"):
                    self.t += self.jitter(p.dataloader_ns)
            with self.frame("train.py(31): train_step"):
                self._inputs()
                with self.frame("model.py(14): forward"):
                    for layer in range(p.layers):
                        self._linear(layer)
                if p.loop_ops:
                    self._prompt_loop()
                with self.frame("torch/_tensor.py(626): backward"):
                    for layer in range(p.layers):
                        with self.op("autograd::engine::evaluate_function: AddmmBackward0"):
                            for _ in range(2):
                                with self.op("aten::mm", ["float"] * 2 if p.fp32_matmul else ["c10::BFloat16"] * 2,
                                             [[256, 1024], [1024, 1024]]):
                                    self.kernel(GEMM_FP32 if p.fp32_matmul else GEMM_BF16, p.gemm_ns)
                if world > 1 and p.allreduce_bytes:
                    self._allreduce(world)
                self._optimizer()
                if p.item_per_step:
                    with self.op("aten::item", ["float"], [[]]), self.op("aten::_local_scalar_dense", ["float"], [[]]):
                        self.memcpy("DtoH", "Device", "Pageable", 4, 1.0)
                        self.sync()
                if p.explicit_sync:
                    with self.frame("torch/cuda/__init__.py(1041): synchronize"):
                        self.sync("cudaDeviceSynchronize")

    def _inputs(self) -> None:
        p = self.plan
        for nbytes, src, gbps in ((p.pageable_bytes, "Pageable", 6.0), (p.pinned_bytes, "Pinned", 22.0)):
            if nbytes:
                with self.op("aten::to"), self.op("aten::_to_copy"), self.op("aten::copy_"):
                    self.memcpy("HtoD", src, "Device", nbytes, gbps)

    def _linear(self, layer: int) -> None:
        p = self.plan
        with self.frame("torch/nn/modules/module.py(1762): _call_impl"), self.frame(f"nn.Module: Linear_{layer}"), \
                self.frame("torch/nn/modules/linear.py(125): forward"), self.frame("<built-in function linear>"):
            with self.op("aten::linear", ["float"] * 3, [[256, 1024], [1024, 1024], [1024]]):
                with self.op("aten::t"):
                    pass
                types = ["float"] * 3 if p.fp32_matmul else ["c10::BFloat16"] * 3
                with self.op("aten::addmm", types + ["Scalar", "Scalar"], [[1024], [256, 1024], [1024, 1024], [], []]):
                    self.kernel(GEMM_FP32 if p.fp32_matmul else GEMM_BF16, p.gemm_ns)
        with self.frame("torch/nn/functional.py(1697): relu"), self.frame("<built-in method relu of type object>"):
            with self.op("aten::relu"):
                self.kernel(ELEMENTWISE.format(op="ReluFunctor"), p.elementwise_ns)

    def _prompt_loop(self) -> None:
        """The reference report's `_apply_prompt`: one tiny kernel per (row, position)."""
        with self.frame("model.py(52): _apply_prompt"):
            for _ in range(self.plan.loop_ops):
                with self.op("aten::index_put_", ["float", "TensorList", "float", "Scalar"]):
                    self.kernel(INDEX_PUT, self.plan.loop_kernel_ns)

    def _allreduce(self, world: int) -> None:
        """DDP's bucket all-reduce: the kernel runs from when this rank arrives until the last
        rank has arrived and the data has crossed the link."""
        nelems = self.plan.allreduce_bytes // 4
        transfer = int(self.plan.allreduce_bytes * 2 * (world - 1) / world / self.plan.link_gbps)
        late = self.late_rank is not None and self.collective_index % 2 == 0
        wait = 0 if (not late or self.rank == self.late_rank) else 300_000
        self.collective_index += 1
        with self.op("record_param_comms"):
            self._gpu("kernel", ALLREDUCE, wait + transfer, 20, "cudaLaunchKernel",
                      {"Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems,
                       "Group size": world, "dtype": "Float", "Process Group Name": "0",
                       "Process Group Description": "default_pg"})

    def _optimizer(self) -> None:
        with self.frame("torch/optim/optimizer.py(485): wrapper"), self.annotation("Optimizer.step#Adam.step"):
            with self.op("aten::_fused_adam_"):
                for _ in range(2):
                    self.kernel(ADAM, 40_000)


def training_trace(path: Path, *, events: int, plan: Plan | None = None, rank: int = 0, world: int = 1,
                   late_rank: int | None = None, seed: int = 0, gz: bool = False, max_steps: int | None = None) -> int:
    """Simulate steps until about `events` events are written; returns the event count."""
    plan = plan or Plan()
    dist = {"backend": "nccl", "rank": rank, "world_size": world} if world > 1 else None
    w = KinetoWriter(path, device_properties=[A100], distributed=dist, gz=gz, int_times=plan.int_times)
    sim = Simulator(w, plan, rank=rank, rng=random.Random(seed * 1000 + rank), late_rank=late_rank,
                    pid=4242 + rank, tid=4242 + rank, device=rank)
    w.metadata("process_name", sim.pid, 0, {"name": "python"})
    w.metadata("process_labels", sim.pid, 0, {"labels": "CPU"})
    w.metadata("process_name", sim.device, 0, {"name": f"GPU {sim.device}"})
    w.metadata("thread_name", sim.pid, sim.tid, {"name": f"thread {sim.tid} (python)"})
    w.complete("Trace", "PyTorch Profiler (0)", "Spans", "PyTorch Profiler", BASE_TS_NS, 1, {"Op count": 0})
    n = 1
    with sim.frame("train.py(88): <module>"), sim.frame("train.py(40): main"):
        while w.count < events and (max_steps is None or n <= max_steps):
            sim.step(n, world)
            n += 1
    end = max([sim.t] + list(sim.gpu_free.values()))
    w.close(end + 1_000)
    return w.count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--gz", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    plan = Plan(item_per_step=True, pageable_bytes=8 << 20, allreduce_bytes=(64 << 20) if args.ranks > 1 else 0)
    for rank in range(args.ranks):
        out = args.out if args.ranks == 1 else args.out.with_name(f"{args.out.stem}.rank{rank}{args.out.suffix}")
        count = training_trace(out, events=args.events, plan=plan, rank=rank, world=args.ranks,
                               late_rank=1 if args.ranks > 1 else None, seed=args.seed, gz=args.gz)
        print(f"wrote {out} ({count:,} events)")


if __name__ == "__main__":
    main()
