"""The doctor's code that starts in the middle of the script's compiled call (the line sampler's
timer signal) leaves Dynamo's work as the script alone makes it. A CI run counted two compiled
frames under the doctor where the script alone has one: the timer fired inside the compiled call,
and the handler's first call to a library function (`Counter.__missing__`) was handed to Dynamo.
In a fresh process: Dynamo marks each code object once, for the whole process."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import torchdoctor

SRC = str(Path(torchdoctor.__file__).resolve().parent.parent)

SCRIPT = textwrap.dedent("""
    import json, torch
    from torch import nn
    from torch._dynamo import eval_frame
    from torch._dynamo.utils import counters
    from torchdoctor.run.probes.compile import _skip_own_code
    from torchdoctor.run.probes.line_sampler import LineSampler

    model = torch.compile(nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)), backend="eager")
    x = torch.randn(8, 16)
    model(x)  # compiled: the script's one frame
    _skip_own_code(eval_frame)  # as the compile probe does when the script compiles
    # ten times the real rate: many signals land inside a compiled call. `evaluating`, called by the handler at
    # every sample, is code that is not the doctor's (the real handler calls Counter.__missing__ for a new line)
    sampler = LineSampler(interval_s=1e-4, evaluating=lambda: False)
    sampler.install()
    sampler.activate("train")
    try:
        for _ in range(3000):
            model(x)
        samples, mode = sampler._pending_total, sampler.mode  # (a window's end drops a step it did not close)
    finally:
        sampler.deactivate()
        sampler.uninstall()
    print(json.dumps({"frames": dict(counters["frames"]), "samples": samples, "mode": mode}))
""")


@pytest.mark.skipif(sys.platform == "win32", reason="the line sampler's timer is a POSIX signal")
def test_the_line_samplers_timer_inside_compiled_calls_adds_no_compiled_frame():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["mode"] == "signal" and out["samples"] > 100  # the timer did fire, many times, around and inside the compiled calls
    assert out["frames"] == {"total": 1, "ok": 1}
