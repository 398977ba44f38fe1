"""Hooking compiled contexts that exist already must not reset Python's record of warnings shown:
a script's once-per-line warning (Dynamo's "global hooks" one) would print a second time."""

import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[4] / "src")

SCRIPT = """
import warnings
from torchdoctor.run.probes.compile import existing_instances  # torch's import sets filters: before
warnings.simplefilter("default")
def warn():
    warnings.warn("the script's own warning", UserWarning)
class Context:
    pass
kept = [Context(), Context()]
warn()
found = existing_instances(Context)
warn()
print(len([o for o in found if o in kept]))
"""


def test_finding_existing_contexts_leaves_the_scripts_warnings_shown_once():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"  # both live contexts found
    assert done.stderr.count("the script's own warning") == 1, done.stderr
