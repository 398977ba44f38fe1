"""Speed, memory and agreement of `torchdoctor trace` against Holistic Trace Analysis (HTA).

For traces of 100k, 1M and 3M events written by `trace_gen.py`, each tool runs in its own
process on the same file, three times (the median is reported); wall time is measured end
to end (interpreter start to exit), and again in process (the analysis alone, after
imports), and peak memory is the highest max RSS of those processes (from /usr/bin/time).
Both tools start from compiled bytecode, as installed packages do.
torchdoctor runs `torchdoctor trace FILE --format json`; HTA 0.5.0 (installed in a throwaway
venv, never a project dependency) loads the trace and computes its temporal breakdown and
idle-time breakdown.

The agreement check replays HTA's arithmetic on torchdoctor's decoded events (same window,
same kernel set, HTA's rounding and classification) and requires it to reproduce HTA's
numbers exactly; the difference between that replay and torchdoctor's own breakdown is then
split into its documented causes, each switched on alone.

    python benchmarks/trace_speed.py [--sizes 100000 1000000 3000000] [--hta-max-events N] [--repeats 3]

Results go to benchmarks/results/trace_speed.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import trace_gen  # noqa: E402

from torchdoctor.trace import idle  # noqa: E402
from torchdoctor.trace.joins import Joins  # noqa: E402
from torchdoctor.trace.events import STEP_RE  # noqa: E402
from torchdoctor.trace.loader import load_trace  # noqa: E402
from torchdoctor.trace.timeline import union  # noqa: E402
from torchdoctor.trace.windows import Window  # noqa: E402

HTA_VERSION = "0.5.0"
# HTA 0.5.0 breaks on pandas 3 (int16 downcast then assignment); pandas 2.2 is what it was built with.
HTA_REQUIREMENTS = [f"holistictraceanalysis=={HTA_VERSION}", "pandas<2.3"]
HTA_KERNEL_WAIT_US = 30  # HTA's default consecutive_kernel_delay (its traces are in µs)
# ~29 events per layer: steps of ~30k events, as a transformer-sized step recorded with stacks.
# Real profiler windows hold a few large steps; HTA assigns events to steps in O(events x
# steps), so thousands of tiny steps would measure that loop rather than the analysis.
PLAN = trace_gen.Plan(layers=1000, item_per_step=True, pageable_bytes=8 << 20)
# A launch-bound loop whose launches start 1 µs before the previous kernel ends (host 2 µs +
# launch 5 µs per op; kernels start 3 µs after their launch and run 5 µs).
OVERLAP_PLAN = trace_gen.Plan(layers=1, loop_ops=400, loop_kernel_ns=5_000, host_op_ns=2_000, launch_ns=5_000,
                              latency_ns=3_000, dataloader_ns=20_000)

# In-process times exclude interpreter start-up and imports (pandas for HTA, the CLI's
# rich/rules modules for torchdoctor): the work each tool does on the trace itself.
OURS_SCRIPT = r"""
import json, sys, time
from torchdoctor.report import render
from torchdoctor.diagnosis.trace import trace_report
from torchdoctor.trace import analyze_trace_files
t0 = time.perf_counter()
summary = analyze_trace_files([sys.argv[1]])
render(trace_report(summary), "json")
print("RESULT " + json.dumps({"inprocess_s": time.perf_counter() - t0}))
"""
HTA_SCRIPT = r"""
import json, sys, time
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
ta = TraceAnalysis(trace_files={0: sys.argv[1]}, trace_dir="/")
t1 = time.perf_counter()
tb = ta.get_temporal_breakdown(visualize=False)
ib = ta.get_idle_time_breakdown(visualize=False)[0]
t2 = time.perf_counter()
row = tb.iloc[0]
out = {"load_s": t1 - t0, "analysis_s": t2 - t1, "inprocess_s": t2 - t0,
       "temporal": {k: float(row[k]) for k in tb.columns if k.endswith("(us)")},
       "idle": {f"{int(r.stream)}:{r.idle_category}": float(r.idle_time) for r in ib.itertuples()}}
print("RESULT " + json.dumps(out))
"""


def run_measured(cmd: list[str]) -> dict:
    """Run a command; its wall and CPU time, exit status, peak RSS (MiB) and RESULT line.

    Peak memory comes from /usr/bin/time, which forks the command from its own small
    process: Linux carries a forked process's RSS high-water mark across exec, so a command
    forked straight from this (large) benchmark process would report this process's size.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".time") as stats:
        start = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%e %U %S %M", "-o", stats.name, *cmd],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        _, user, system, max_kib = stats.read().split()[-4:]
    # the 1-minute load average when it ended: other processes on the machine slow both tools
    result = {"wall_s": round(wall, 3), "cpu_s": round(float(user) + float(system), 3),
              "peak_mib": round(int(max_kib) / 1024, 1), "exit": proc.returncode,
              "load_avg_1min": round(os.getloadavg()[0], 2)}
    lines = [ln for ln in proc.stdout.decode(errors="replace").splitlines() if ln.startswith("RESULT ")]
    if lines:
        result["result"] = json.loads(lines[-1][len("RESULT "):])
    return result


def run_repeated(cmd: list[str], repeats: int) -> dict:
    """`run_measured` `repeats` times: median wall and CPU time, highest peak memory, every wall.

    One run is not enough on a shared VM: on this machine the same 3M-event analysis has
    taken 5.9 s at one hour and 7.6-9.6 s at another (file reads cost more system time when
    the page cache has been pushed out by the other tool's run).
    """
    runs = [run_measured(cmd) for _ in range(repeats)]
    middle = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
    return {**middle, "wall_s_runs": [r["wall_s"] for r in runs],
            "peak_mib": max(r["peak_mib"] for r in runs),
            "exit": max(r["exit"] for r in runs)}


def compile_torchdoctor_bytecode() -> None:
    """Compile torchdoctor's modules to bytecode, as `pip install` does for HTA's venv.

    A development checkout is an editable install, and where PYTHONDONTWRITEBYTECODE is set
    (it is on the machines these results come from) every start would compile ~35 modules
    from source: ~60 ms that no installed copy pays, a seventh of the 100k-event run.
    """
    import compileall
    import torchdoctor

    compileall.compile_dir(Path(torchdoctor.__file__).parent, quiet=1)


def hta_python(venv: Path | None) -> Path:
    if venv is None:
        venv = Path(tempfile.gettempdir()) / f"torchdoctor-bench-hta-{HTA_VERSION}"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *HTA_REQUIREMENTS], check=True)
    return python


# --- HTA's arithmetic, replayed on torchdoctor's events (for the agreement check) ------------

def _hta_window_events(ev, *, include_sync: bool):
    """GPU events HTA keeps: launched (by correlation) from a CPU event that started before the
    last ProfilerStep; with `include_sync`, also CUPTI sync records (HTA's GPU filter keeps
    any event with a stream and a correlation, so `Stream Sync` counts as a GPU kernel)."""
    steps = sorted(a.ts for a in ev.annotations if STEP_RE.match(a.name))
    cutoff = steps[-1] if len(steps) >= 2 else math.inf
    launched = {rt.args.correlation for rt in ev.runtime if rt.ts < cutoff}
    gpu = [e for e in ev.gpu if e.args.correlation in launched]
    if include_sync:
        gpu += [e for e in ev.syncs if e.args.stream >= 0 and e.args.correlation in launched]
    return gpu


_HTA_COMM = re.compile(r"^nccl.*Kernel")
_HTA_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def _kind(name: str) -> str:
    """HTA 0.5.0's get_kernel_type: cuda_sync records ("Stream Sync") are "other": not
    compute, but still part of its GPU timeline."""
    if _HTA_COMM.match(name):
        return "comm"
    if _HTA_MEMORY.match(name):
        return "memory"
    return "other" if _HTA_NOT_COMPUTE.match(name) else "compute"


def _hta_union_length(intervals: list[tuple[float, float]]) -> tuple[float, float, float]:
    """HTA's merge_kernel_intervals: a new group when ts > the running max of previous ends;
    returns (union length, first start, last group end)."""
    intervals.sort()
    total, run_max, first, last_end = 0.0, -math.inf, None, None
    group_s = group_e = None
    for s, e in intervals:
        if group_s is None or s > run_max:
            if group_s is not None:
                total += group_e - group_s
            group_s, group_e = s, e
            first = s if first is None else first
        else:
            group_e = max(group_e, e)
        run_max = max(run_max, e)
        last_end = group_e
    if group_s is not None:
        total += group_e - group_s
    return total, first, last_end


def temporal_breakdown(ev, *, round_like_hta: bool, include_sync: bool) -> dict:
    gpu = _hta_window_events(ev, include_sync=include_sync)
    spans = []
    for e in gpu:
        s, t = e.ts, e.ts + e.dur
        if round_like_hta:
            s, t = math.ceil(s), math.floor(t)
        spans.append((s, t, _kind(e.name)))
    busy, first, last = _hta_union_length([(s, t) for s, t, _ in spans])
    compute, _, _ = _hta_union_length([(s, t) for s, t, k in spans if k == "compute"])
    kernel_time = last - first
    idle_us = kernel_time - busy
    return {"idle_time(us)": idle_us, "compute_time(us)": compute,
            "non_compute_time(us)": kernel_time - compute - idle_us, "kernel_time(us)": kernel_time}


def idle_breakdown_hta_rule(ev, *, stream: int = 7) -> dict:
    """HTA's per-stream rule: host wait if the launch started after the previous kernel ended,
    kernel wait if the gap is under 30 µs, other otherwise (rounded times, syncs included)."""
    gpu = [e for e in _hta_window_events(ev, include_sync=True) if e.args.stream == stream]
    runtime = {rt.args.correlation: rt for rt in ev.runtime}
    rows = sorted((math.ceil(e.ts), math.floor(e.ts + e.dur), runtime.get(e.args.correlation)) for e in gpu)
    out = {"host_wait": 0.0, "kernel_wait": 0.0, "other": 0.0}
    for (_, prev_end, _), (ts, _, rt) in zip(rows, rows[1:]):
        gap = ts - prev_end
        rt_ts = math.ceil(rt.ts) if rt is not None else -math.inf
        category = "host_wait" if rt_ts > prev_end else ("kernel_wait" if gap < HTA_KERNEL_WAIT_US else "other")
        out[category] += gap
    return out


def ours_on_hta_window(ev) -> dict:
    """torchdoctor's own device breakdown and idle causes over HTA's window (exact times)."""
    gpu = sorted(_hta_window_events(ev, include_sync=False), key=lambda e: e.ts)
    starts = [e.ts for e in gpu]
    ends = [e.ts + e.dur for e in gpu]
    busy = union(starts, ends)
    compute = union(starts, ends, [i for i, e in enumerate(gpu) if _kind(e.name) == "compute"])
    lo, hi = busy.starts[0], max(ends)
    return {"idle_time(us)": (hi - lo) - busy.total(), "compute_time(us)": compute.total(),
            "non_compute_time(us)": busy.total() - compute.total(), "kernel_time(us)": hi - lo}


def ours_idle_causes_on_hta_window(ev) -> dict:
    """torchdoctor's idle causes for the same kernels and window HTA uses."""
    gpu = sorted(_hta_window_events(ev, include_sync=False), key=lambda e: e.ts)
    busy = union([e.ts for e in gpu], [e.ts + e.dur for e in gpu])
    joins = Joins.build(ev)
    window = [Window("hta", busy.starts[0], busy.ends[-1])]
    result = idle.classify_idle(busy, gpu, window, joins, idle.blocking_calls(joins), idle.dataloader_union(ev.annotations))
    return {k: round(v, 3) for k, v in result.per_window[0].items() if v}


def agreement(path: Path, hta: dict | None) -> dict:
    ev = load_trace(path).events
    replay = temporal_breakdown(ev, round_like_hta=True, include_sync=True)
    exact = ours_on_hta_window(ev)
    out = {"hta_replay": replay, "torchdoctor_exact": exact,
           "effect_of_rounding_only": _delta(temporal_breakdown(ev, round_like_hta=True, include_sync=False), exact),
           "effect_of_sync_records_only": _delta(temporal_breakdown(ev, round_like_hta=False, include_sync=True), exact),
           "hta_rule_idle_stream7": idle_breakdown_hta_rule(ev)}
    out["torchdoctor_idle_causes_on_hta_window_us"] = ours_idle_causes_on_hta_window(ev)
    if hta is not None:
        out["hta_reported"] = hta["temporal"]
        out["replay_matches_hta"] = all(abs(replay[k] - hta["temporal"][k]) < 1e-6 for k in replay)
        out["hta_reported_idle"] = hta["idle"]
    return out


def _delta(a: dict, b: dict) -> dict:
    return {k: round(a[k] - b[k], 3) for k in a}


# --- main -----------------------------------------------------------------------------------

def machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    mem = next((int(ln.split()[1]) // 1024 for ln in Path("/proc/meminfo").read_text().splitlines()
                if ln.startswith("MemTotal")), None)
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "memory_mib": mem, "python": platform.python_version(),
            "platform": platform.platform()}


def generate(path: Path, events: int, plan: str, seed: int) -> None:
    """Write a trace in a child process, so this process stays small."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import trace_gen, trace_speed; "
            f"print(trace_gen.training_trace({str(path)!r}, events={events}, plan=trace_speed.{plan}, seed={seed}))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    print(f"generated {path} ({int(out.split()[-1]):,} events)", flush=True)


def bounded_rows(sizes: list[int], limit_mib: int, work: Path, repeats: int) -> list[dict]:
    """`torchdoctor trace` on traces larger than the memory it may use: the process runs under
    an address-space limit (`ulimit -v`, RLIMIT_AS), which its memory budget reads, so it
    streams the file (trace/streamed.py). Peak RSS against the file's size."""
    rows = []
    for n in sizes:
        path = work / f"bounded_{n}.json"
        if not path.exists():
            generate(path, n, "PLAN", seed=3)
        limited = ["bash", "-c", f"ulimit -v {limit_mib * 1024} && exec \"$0\" \"$@\"", sys.executable, "-m",
                   "torchdoctor", "trace", str(path), "--format", "json"]
        row = {"events": n, "file_mib": round(path.stat().st_size / 2**20, 1), "limit_mib": limit_mib,
               "torchdoctor": run_repeated(limited, repeats)}
        out = subprocess.run(limited, capture_output=True, text=True)
        row["streamed"] = "streamed:" in out.stdout
        print("bounded", n, row, flush=True)
        rows.append(row)
        path.unlink()  # several GB: never left behind
    return rows


def side_by_side(sizes: list[int], hta_target: Path, label: str, work: Path, repeats: int) -> list[dict]:
    """Both tools on the same files in the same run: torchdoctor, then HTA installed in
    `hta_target` (pip install --target, run with this interpreter and that folder on its path)."""
    compile_torchdoctor_bytecode()
    hta_cmd = ["env", f"PYTHONPATH={hta_target}", sys.executable, "-c", HTA_SCRIPT]
    rows = []
    for n in sizes:
        path = work / f"trace_{n}.json"
        if not path.exists():
            generate(path, n, "PLAN", seed=1)
        row = {"events": n, "file_mib": round(path.stat().st_size / 2**20, 1),
               "torchdoctor": run_repeated([sys.executable, "-m", "torchdoctor", "trace", str(path), "--format", "json"],
                                           repeats),
               label: run_repeated([*hta_cmd, str(path)], repeats)}
        if row[label]["exit"] == 0:
            row["speedup"] = round(row[label]["wall_s"] / row["torchdoctor"]["wall_s"], 1)
            row["memory_ratio"] = round(row["torchdoctor"]["peak_mib"] / row[label]["peak_mib"], 3)
            row[label]["result"] = {k: v for k, v in row[label]["result"].items() if k.endswith("_s")}
        print(n, {k: v for k, v in row.items() if k not in ("torchdoctor", label)}, flush=True)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["side-by-side", "bounded"],
                    help="run one section and add it to the existing results (the other sections are kept)")
    ap.add_argument("--hta-target", type=Path, help="side-by-side: a folder HTA (traceinsight) was pip-installed into")
    ap.add_argument("--hta-label", default="traceinsight 0.6.1", help="side-by-side: the HTA package and version")
    ap.add_argument("--bounded", type=int, nargs="+", default=[7_000_000],
                    help="bounded: trace sizes in events (~280 bytes of JSON each: 7M is ~2 GB)")
    ap.add_argument("--limit-mib", type=int, default=1024, help="bounded: the address-space limit of the process")
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 3_000_000])
    ap.add_argument("--hta-max-events", type=int, default=3_000_000,
                    help="run HTA only on traces up to this many events (it needs ~10x our time and memory)")
    ap.add_argument("--hta-venv", type=Path, help="a venv with HTA installed (default: a temporary one)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each tool per trace; the median is reported")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "torchdoctor-trace-bench")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "trace_speed.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.only:
        doc = json.loads(args.out.read_text()) if args.out.exists() else {}
        section = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "machine": machine(),
                   "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
        if args.only == "side-by-side":
            section["tools"] = {"torchdoctor": "this checkout", "hta": args.hta_label}
            section["rows"] = side_by_side(args.sizes, args.hta_target, args.hta_label, args.work, args.repeats)
            doc["side_by_side"] = section
        else:
            section["rows"] = bounded_rows(args.bounded, args.limit_mib, args.work, args.repeats)
            doc["memory_bounded"] = section
        section["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.out}")
        return
    hta_py = hta_python(args.hta_venv)
    compile_torchdoctor_bytecode()
    ours_cmd = [sys.executable, "-m", "torchdoctor", "trace", "--format", "json"]
    rows = []
    for n in args.sizes:
        path = args.work / f"trace_{n}.json"
        if not path.exists():
            generate(path, n, "PLAN", seed=1)
        row = {"events": n, "file_mib": round(path.stat().st_size / 2**20, 1)}
        row["torchdoctor"] = run_repeated([*ours_cmd[:4], str(path), *ours_cmd[4:]], args.repeats)
        row["torchdoctor"]["inprocess_s"] = round(run_repeated(
            [sys.executable, "-c", OURS_SCRIPT, str(path)], args.repeats)["result"]["inprocess_s"], 3)
        print(n, "torchdoctor", row["torchdoctor"], flush=True)
        if n <= args.hta_max_events:
            row["hta"] = run_repeated([str(hta_py), "-c", HTA_SCRIPT, str(path)], args.repeats)
            print(n, "hta", {k: v for k, v in row["hta"].items() if k != "result"}, flush=True)
            if row["hta"]["exit"] == 0:
                row["speedup"] = round(row["hta"]["wall_s"] / row["torchdoctor"]["wall_s"], 1)
                row["speedup_inprocess"] = round(row["hta"]["result"]["inprocess_s"] /
                                                 row["torchdoctor"]["inprocess_s"], 1)
                row["memory_ratio"] = round(row["torchdoctor"]["peak_mib"] / row["hta"]["peak_mib"], 3)
        else:
            row["hta"] = {"skipped": f"over --hta-max-events={args.hta_max_events}"}
        if n <= 1_000_000:
            row["agreement"] = agreement(path, row["hta"].get("result"))
        rows.append(row)
    overlap = args.work / "overlapping_launches.json"
    generate(overlap, 60_000, "OVERLAP_PLAN", seed=2)
    hta_overlap = run_measured([str(hta_py), "-c", HTA_SCRIPT, str(overlap)])
    doc = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "tools": {"torchdoctor": "this checkout", "hta": HTA_VERSION, "hta_requirements": HTA_REQUIREMENTS},
        "method": [ln for ln in __doc__.split("    python benchmarks/")[0].strip().splitlines()[2:] if ln],
        "rows": rows,
        "overlapping_launches": {"events": 60_000, "plan": "launch-bound loop, each launch starting 1 µs before "
                                 "the previous kernel ends", **agreement(overlap, hta_overlap.get("result"))},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
