"""The GPU check's steps: what each one runs, its time budget, and the files it needs and writes.

Every step is one command under the interpreter being checked, stopped when its budget is
spent; the budgets add up to less than TOTAL_BUDGET_S, so the whole check fits the GPU
machine's 10-minute command limit with room for start-up. A rehearsal (`--rehearse`) runs
the same steps in their small form, so the orchestration can be proven on a CPU machine.
No torch here: this module is read by dev.py under any Python 3.10+.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
TOTAL_BUDGET_S = 540.0  # 9 minutes: inside one 10-minute device command with the start-up and transfers, and a
# 15-minute device lease; the steps' budgets are what the H200 run of 2026-11-27 took, with room
WHEELS_DIR = ".gpu-wheels"  # --prepare writes it (git-ignored); the GPU run installs from it
REAL_FIXTURES = "tests/fixtures/real"
GPU_RESULTS = "benchmarks/results/gpu"
REAL_FIXTURES_ENV = "TORCHDOCTOR_REAL_FIXTURES"  # the twins read recorded fixtures from here instead

# Recorded as real fixtures: the examples whose generated-trace unit tests gain a twin.
FIXTURE_EXAMPLES = ("host_sync_item.py", "gpu_pageable_copy.py", "gpu_fp32_matmul.py", "python_loop_ops.py")
REHEARSAL_FIXTURE_EXAMPLES = ("host_sync_item.py",)

# `tune` trials per example: (knobs, the finding codes the trial tests). A trial that tests a
# finding is compared with that finding's estimate; one that tests none is measured only.
TuneTrials = tuple[tuple[str, tuple[str, ...]], ...]
TUNE_PLAN: tuple[tuple[str, TuneTrials], ...] = (
    ("gpu_fp32_matmul.py", (("amp=bf16", ("TD402",)), ("tf32=true", ("TD403",)))),
    ("gpu_pageable_copy.py", (("pin_memory=true", ("TD103",)), ("pin_memory=true non_blocking=true", ("TD103",)))),
    ("gpu_blocking_copy.py", (("non_blocking=true", ("TD104",)),)),
    ("clean_cnn.py", (("channels_last=true", ()), ("cudnn_benchmark=true", ()))),
    ("python_loop_ops.py", (("compile=true", ("TD301",)),)),  # last: compiling may outlast its share
)
REHEARSAL_TUNE_PLAN: tuple[tuple[str, TuneTrials], ...] = (
    ("foreach_off.py", (("foreach=true", ("TD302",)),)),
)
DEMO = ("demo_prompt_encoder.py", "demo_prompt_encoder_fixed.py")
REHEARSAL_ACCURACY_EXAMPLES = ("host_sync_item.py", "clean_mlp_trainer.py")


@dataclass
class Context:
    root: Path
    python: str  # the interpreter whose torch is checked: the GPU machine's python3 as it is
    work: Path  # scratch folder: each step writes its result and log here
    rehearse: bool
    pythonpath: list[str] = field(default_factory=list)  # set by the install step
    accuracy_only: str | None = None  # comma-separated examples: a rerun's accuracy step on some only


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    budget_s: float
    command: Callable[[Context, float], list[str]]  # (context, seconds it may take) -> argv
    result: str | None = None  # the file in the work folder it writes (packed under the run's tag)
    scripts: tuple[str, ...] = ()  # step scripts the dry run imports (each guarded by __main__)
    needs: tuple[str, ...] = ()  # other repository paths it reads
    env: Callable[[Context], dict[str, str]] | None = None
    exit_codes: dict[int, str] = field(default_factory=dict)  # what a non-zero exit means, for the summary


PYTEST_EXITS = {1: "some tests failed (below)", 2: "pytest was interrupted", 3: "pytest hit an internal error",
                4: "pytest usage error", 5: "no tests were collected"}


def _module(name: str) -> str:
    return f"benchmarks/gpucheck/{name}.py"


def _examples(names) -> tuple[str, ...]:
    return tuple(f"examples/{n}" for n in names)


def _install(ctx: Context, budget: float) -> list[str]:
    return [ctx.python, "-m", "benchmarks.gpucheck.install", "--wheels", WHEELS_DIR,
            "--target", str(ctx.work / "site"), "--out", str(ctx.work / "install.json")]


def _machine(ctx: Context, budget: float) -> list[str]:
    return [ctx.python, "-m", "benchmarks.gpucheck.machine", "--out", str(ctx.work / "machine.json")]


def _pytest(ctx: Context, junit: str, *selection: str) -> list[str]:
    return [ctx.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={ctx.work / junit}", *selection]


def _accuracy(ctx: Context, budget: float) -> list[str]:
    # Three examples at a time on one GPU: 21 examples one by one do not fit the budget. The
    # check is whether each cause is found at its line; the timings inside are not clean.
    extra = ["--only", ",".join(REHEARSAL_ACCURACY_EXAMPLES)] if ctx.rehearse else ["--jobs", "3"]
    if ctx.accuracy_only and not ctx.rehearse:
        extra += ["--only", ctx.accuracy_only]
    return [ctx.python, "benchmarks/accuracy.py", "--out", str(ctx.work / "accuracy.json"), *extra]


def _overhead(ctx: Context, budget: float) -> list[str]:
    # The one workload that takes a device: the whole list is a CPU benchmark of many minutes.
    device = ["--device", "cpu", "--rounds", "2"] if ctx.rehearse else ["--device", "cuda", "--rounds", "5"]
    return [ctx.python, "benchmarks/overhead.py", "--out", str(ctx.work / "overhead.json"), "--only", "synthetic_mlp",
            *device]


def _tune(ctx: Context, budget: float) -> list[str]:
    return [ctx.python, "-m", "benchmarks.gpucheck.tune_cuda", "--out", str(ctx.work / "tune.json"),
            "--budget", f"{budget - 10:.0f}", *(["--rehearse"] if ctx.rehearse else [])]


def _demo(ctx: Context, budget: float) -> list[str]:
    return [ctx.python, "-m", "benchmarks.gpucheck.demo_cuda", "--out", str(ctx.work / "demo.json"),
            *(["--repeats", "1", "--steps", "10"] if ctx.rehearse else [])]


def _memory(ctx: Context, budget: float) -> list[str]:
    return [ctx.python, "-m", "benchmarks.gpucheck.memory_cuda", "--out", str(ctx.work / "memory.json"),
            *(["--rehearse"] if ctx.rehearse else [])]


def _fixtures(ctx: Context, budget: float) -> list[str]:
    return [ctx.python, "-m", "benchmarks.gpucheck.record_fixtures", "--out", str(ctx.work / "fixtures"),
            "--machine", str(ctx.work / "machine.json"), *(["--rehearse"] if ctx.rehearse else [])]


TWIN_TESTS = ("tests/unit/trace/test_trace_real_gpu.py", "tests/unit/run/probes/test_nvml_real_gpu.py")


def _twins(ctx: Context, budget: float) -> list[str]:
    return _pytest(ctx, "fixture-twins.xml", *TWIN_TESTS)


# Order: the real fixtures early (they are what no CPU can ever make), tune last (it shares out
# whatever time it is given, and its trials are the slowest to start).
STEPS: tuple[Step, ...] = (
    Step("install", "install torchdoctor (--no-deps --no-index) and the carried wheels into a target folder",
         10, _install, "install.json", (_module("install"),),
         exit_codes={1: "the torchdoctor install failed (src/ used instead) or msgspec/libcst do not import (below)"}),
    Step("machine", "device, driver, CUDA and torch versions; every import the check needs", 10, _machine,
         "machine.json", (_module("machine"),), exit_codes={1: "a package the check needs does not import (below)"}),
    Step("gpu-tests", "the gpu-marked tests", 40, lambda c, b: _pytest(c, "gpu-tests.xml", "-m", "gpu", "tests"),
         "gpu-tests.xml", (), ("tests/integration/test_gpu_runs.py", "tests/conftest.py"), exit_codes=PYTEST_EXITS),
    Step("fixtures", "real fixtures: 2-step Kineto traces, NVML samples, topology, NCCL INFO, CUDA memory", 75,
         _fixtures, "fixtures", (_module("record_fixtures"),), _examples(FIXTURE_EXAMPLES),
         exit_codes={1: "no CUDA device: nothing real to record"}),
    Step("fixture-twins", "the real-fixture twins of the generated-trace tests, on the fixtures just recorded", 10,
         _twins, "fixture-twins.xml", (), TWIN_TESTS,
         env=lambda c: {REAL_FIXTURES_ENV: str(c.work / "fixtures")}, exit_codes=PYTEST_EXITS),
    Step("accuracy", "every example with its planted cause, through benchmarks/accuracy.py", 130, _accuracy,
         "accuracy.json", ("benchmarks/accuracy.py",), ("examples",),
         exit_codes={1: "a planted cause was missed or a false positive found (table below)"}),
    Step("overhead", "step time with vs without the doctor, alternating in one process", 40, _overhead,
         "overhead.json", ("benchmarks/overhead.py",), ("benchmarks/overhead_workloads/synthetic_mlp.py",),
         exit_codes={1: "the overhead outside sampled steps is over the 2 % target (numbers below)"}),
    Step("demo", "the demo's nested-loop encoder: the doctor's estimate vs the fixed script's measured gain", 80,
         _demo, "demo.json", (_module("demo_cuda"),), _examples(DEMO), exit_codes={1: "a demo run failed (below)"}),
    Step("memory", "torchdoctor memory within 1 GiB of the card: real CUDA out-of-memory trials, the allocator's "
         "reserved peak, memory outside PyTorch, the fit's prediction against the verified batch", 70, _memory,
         "memory.json", (_module("memory_cuda"),), _examples(("clean_cnn.py",)),
         exit_codes={1: "the memory command failed or left no record (below)"}),
    Step("tune", "tune on the examples where amp, tf32, channels_last, cudnn_benchmark, compile and "
         "pinned/non-blocking copies apply: estimate vs measured", 75, _tune, "tune.json", (_module("tune_cuda"),),
         _examples(e for e, _ in TUNE_PLAN + REHEARSAL_TUNE_PLAN), exit_codes={1: "a baseline run failed (below)"}),
)
STEP_NAMES = tuple(s.name for s in STEPS)


ALWAYS_RUN = ("install", "machine")  # every later step needs their results


def select_steps(names: str | None) -> tuple[Step, ...]:
    """The steps of a rerun (`--steps fixtures,memory`), in plan order, install and machine always."""
    if not names:
        return STEPS
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    unknown = sorted(wanted - set(STEP_NAMES))
    if unknown:
        raise ValueError(f"--steps: no step named {', '.join(unknown)}; the steps are {', '.join(STEP_NAMES)}")
    return tuple(s for s in STEPS if s.name in wanted or s.name in ALWAYS_RUN)


def budgets(overrides: dict[str, float]) -> dict[str, float]:
    unknown = sorted(set(overrides) - set(STEP_NAMES))
    if unknown:
        raise ValueError(f"no step named {', '.join(unknown)}; the steps are {', '.join(STEP_NAMES)}")
    return {s.name: overrides.get(s.name, s.budget_s) for s in STEPS}
